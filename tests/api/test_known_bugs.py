"""The gateway's bugs that the generator cannot see, one test each of what a
client needs.  One still open is marked xfail(strict=True): it passes while
the bug is there and fails once it is fixed, so whoever fixes one removes
its marker (and the test then guards the fix).  The bugs Schemathesis finds are in
tests/api/known-findings.json instead."""
import uuid

import pytest

from test_gateway import call, wait_until


def known_bug(why):
    return pytest.mark.xfail(strict=True, reason="gateway bug: " + why)


def test_tools_show_side_effect_and_args_schema():
    items = call("GET", "/v1/tools", op="GET /v1/tools").json()["items"]
    tool = next(t for t in items if t["name"] == "inventory.reserve")
    assert tool.get("side_effect", tool.get("effect")) == "idempotent", tool
    assert "required" in tool.get("args", tool.get("args_schema", {})), tool


def test_cors_preflight_of_an_allowed_origin():
    r = call("OPTIONS", "/v1/sagas", user=None, headers={
        "Origin": "https://console.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status_code in (200, 204), r.text
    assert r.headers.get("Access-Control-Allow-Origin") == "https://console.example"
    assert "POST" in r.headers.get("Access-Control-Allow-Methods", "")
    assert "authorization" in r.headers.get("Access-Control-Allow-Headers", "").lower()


def test_another_users_saga_id_is_not_yours():
    saga = {"v": 1, "type": "saga.start", "saga_id": "api-" + uuid.uuid4().hex, "name": "x",
            "steps": [{"name": "a", "tool": "noop"}]}
    assert call("POST", "/v1/sagas", "admin", json=saga).status_code == 202
    wait_until("/v1/sagas/" + saga["saga_id"], "admin", ["ok"])  # stored, not only sent
    same = call("POST", "/v1/sagas", "submitter", op="POST /v1/sagas", json=saga)
    other = call("POST", "/v1/sagas", "submitter", op="POST /v1/sagas",
                 json=dict(saga, name="y"))
    assert same.status_code != 200, same.text
    assert same.status_code == other.status_code, (same.text, other.text)


@pytest.mark.parametrize("form", ["weak", "list"])
def test_if_none_match_weak_and_list(form):
    saga = call("POST", "/v1/sagas", "admin", json={
        "v": 1, "type": "saga.start", "name": "x",
        "steps": [{"name": "a", "tool": "noop"}]}).json()
    path = saga["links"]["self"]
    wait_until(path, "admin", ["ok"])
    etag = call("GET", path, "admin").headers["ETag"]
    inm = "W/" + etag if form == "weak" else '"0.0", ' + etag
    r = call("GET", path, "admin", op="GET /v1/sagas/{id}", headers={"If-None-Match": inm})
    assert r.status_code == 304


def test_next_link_keeps_the_filters():
    name = "api-page-" + uuid.uuid4().hex[:12]
    # Newest first: one of name, another saga, one of name again.
    for n in (name, name + "-other", name):
        saga = call("POST", "/v1/sagas", "admin", json={
            "v": 1, "type": "saga.start", "name": n,
            "steps": [{"name": "a", "tool": "noop"}]}).json()
        wait_until(saga["links"]["self"], "admin", ["ok"])
    first = call("GET", "/v1/sagas?limit=1&name=" + name, "admin", op="GET /v1/sagas")
    assert [s["name"] for s in first.json()["items"]] == [name]
    link = first.headers["Link"]
    nxt = call("GET", link[link.index("<") + 1:link.index(">")], "admin", op="GET /v1/sagas")
    assert [s["name"] for s in nxt.json()["items"]] == [name], link
