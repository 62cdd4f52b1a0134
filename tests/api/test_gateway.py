"""What the generator does not try, against the gateway tests/api/run.sh
started (SAGAD_TEST_API_URL, a token per user in SAGAD_TEST_API_TOKEN_*):
authentication and the Origin check, the body limit, and one saga end to
end and one approval with real data.  Every answer is also checked against
schemas/openapi.yaml (status, Content-Type, headers, body)."""
import os
import time
import uuid
from pathlib import Path

import pytest
import requests
import schemathesis

SPEC = schemathesis.openapi.from_path(
    str(Path(__file__).resolve().parents[2] / "schemas/openapi.yaml"))
BASE = os.environ["SAGAD_TEST_API_URL"]


def token(user):
    return os.environ["SAGAD_TEST_API_TOKEN_" + user.upper()]


def call(method, path, user="admin", *, op=None, headers=None, **kw):
    """One request; the answer is checked against the document's operation
    (op, "METHOD /template") when given."""
    h = dict(headers or {})
    if user:
        h.setdefault("Authorization", "Bearer " + token(user))
    r = requests.request(method, BASE + path, headers=h, timeout=30, **kw)
    if op:
        m, tmpl = op.split(" ", 1)
        conforms(SPEC[tmpl][m], r)
    return r


def conforms(operation, r):
    assert str(r.status_code) in operation.definition.raw["responses"], (
        "%s %s: status %d is not in the document: %s"
        % (operation.method.upper(), operation.path, r.status_code, r.text[:500]))
    operation.validate_response(r)


def problem(r, status):
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == status and body["type"] == "about:blank"
    return body


CHECKOUT = {"v": 1, "type": "saga.start", "name": "checkout", "input": {"order": 1001},
            "steps": [{"name": "reserve", "tool": "inventory.reserve",
                       "args": {"sku": "BOOK-7", "qty": 2}},
                      {"name": "notify", "tool": "email.send"}]}


# ---- authentication, Origin, size ------------------------------------------------


def test_no_token_is_401():
    r = call("GET", "/v1/sagas", user=None, op="GET /v1/sagas")
    problem(r, 401)
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="sagad"'


def test_unknown_token_is_401():
    r = call("GET", "/v1/sagas", user=None, op="GET /v1/sagas",
             headers={"Authorization": "Bearer sgw_" + "A" * 43})
    assert "not known" in problem(r, 401)["detail"]
    # A token's hash is no token (the users file keeps hashes).
    r = call("POST", "/v1/sagas", user=None, op="POST /v1/sagas", json=CHECKOUT,
             headers={"Authorization": "Basic YWRtaW46YWRtaW4="})
    problem(r, 401)


def test_reader_may_not_submit():
    r = call("POST", "/v1/sagas", "reader", op="POST /v1/sagas", json=CHECKOUT)
    assert "submitter role" in problem(r, 403)["detail"]


def test_body_over_1_mib_is_413():
    body = b'{"v": 1, "pad": "' + b"x" * (1024 * 1024) + b'"}'
    r = call("POST", "/v1/sagas", op="POST /v1/sagas", data=body,
             headers={"Content-Type": "application/json"})
    problem(r, 413)
    # Before authentication: nobody makes the gateway hold more than that.
    problem(call("POST", "/v1/sagas", user=None, data=body), 413)


def test_foreign_origin_is_403():
    r = call("GET", "/v1/sagas", op="GET /v1/sagas", headers={"Origin": "https://evil.example"})
    assert "Origin" in problem(r, 403)["detail"]
    assert "Access-Control-Allow-Origin" not in r.headers
    # Even with a valid token the request does nothing: not submitted.
    r = call("POST", "/v1/sagas", op="POST /v1/sagas", json=CHECKOUT,
             headers={"Origin": "https://evil.example"})
    problem(r, 403)
    r = call("GET", "/v1/sagas", op="GET /v1/sagas", headers={"Origin": "https://console.example"})
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == "https://console.example"


# ---- one saga, one approval ------------------------------------------------------


def wait_until(path, user, want, seconds=60):
    deadline = time.monotonic() + seconds
    while True:
        r = call("GET", path + "/wait?timeout=2s", user, op="GET /v1/sagas/{id}/wait")
        if r.status_code == 200 and r.json()["status"] in want:
            return r.json()
        assert time.monotonic() < deadline, "%s: not %s after %d s: %s" % (
            path, want, seconds, r.text)


def test_submit_wait_read():
    key = "order-" + uuid.uuid4().hex
    r = call("POST", "/v1/sagas", "submitter", op="POST /v1/sagas", json=CHECKOUT,
             headers={"Idempotency-Key": key})
    assert r.status_code == 202, r.text
    saga = r.json()
    assert r.headers["Location"] == saga["links"]["self"] == "/v1/sagas/" + saga["saga_id"]
    env = wait_until(saga["links"]["self"], "submitter", ["ok", "error", "timeout"])
    assert env["status"] == "ok" and env["saga_status"] == "completed", env
    assert env["submitted_by"] == "submitter"
    assert [s["status"] for s in env["steps"]] == ["succeeded", "succeeded"]
    assert env["run_health"]["ok"] == 2 and env["run_health"]["blocking_failure"] is None

    r = call("GET", saga["links"]["self"], "submitter", op="GET /v1/sagas/{id}")
    assert r.status_code == 200 and "wait_timed_out" not in r.json()
    r2 = call("GET", saga["links"]["self"], "submitter", op="GET /v1/sagas/{id}",
              headers={"If-None-Match": r.headers["ETag"]})
    assert r2.status_code == 304 and r2.headers["ETag"] == r.headers["ETag"]

    # Its events: every one, in seq order, the stream ending after the
    # last; Last-Event-ID resumes after the event it names.
    r = call("GET", saga["links"]["events"], "submitter", op="GET /v1/sagas/{id}/events")
    assert r.headers["Content-Type"] == "text/event-stream"
    ids = [int(line[4:]) for line in r.text.splitlines() if line.startswith("id: ")]
    types = [line[7:] for line in r.text.splitlines() if line.startswith("event: ")]
    assert ids == list(range(1, env["seq"] + 1)) and types[-1] == "saga.completed", r.text
    r = call("GET", saga["links"]["events"], "submitter", op="GET /v1/sagas/{id}/events",
             headers={"Last-Event-ID": str(ids[-2])})
    assert [line for line in r.text.splitlines() if line.startswith("id: ")] == [
        "id: %d" % ids[-1]], r.text

    # The same key again is the same saga; the same saga_id with another
    # definition is a conflict.
    r = call("POST", "/v1/sagas", "submitter", op="POST /v1/sagas", json=CHECKOUT,
             headers={"Idempotency-Key": key})
    assert r.status_code == 200 and r.json() == {"saga_id": saga["saga_id"], "status": "exists",
                                                "links": saga["links"]}
    other = dict(CHECKOUT, saga_id=saga["saga_id"], name="another")
    r = call("POST", "/v1/sagas", "submitter", op="POST /v1/sagas", json=other)
    assert problem(r, 409)["code"] == "input.saga.conflict"

    # Another submitter's saga is not there for it; a reader sees it.
    r = call("GET", "/v1/sagas?name=checkout&limit=1000", "reader", op="GET /v1/sagas")
    assert saga["saga_id"] in [s["saga_id"] for s in r.json()["items"]]


def test_next_page_link_keeps_filters_and_page_size():
    # Three sagas of one name, then pages of two with a filter and the
    # default limit on the second request: each Link conforms to the
    # document, keeps the filter, and following it gives the rest.
    name = "paged-" + uuid.uuid4().hex[:8]
    ids = set()
    for _ in range(3):
        r = call("POST", "/v1/sagas", "admin", op="POST /v1/sagas",
                 json=dict(CHECKOUT, name=name))
        ids.add(r.json()["saga_id"])
    deadline = time.monotonic() + 30  # the list reads PostgreSQL: the worker books them first
    while True:
        r = call("GET", "/v1/sagas?name=%s&limit=2" % name, "admin", op="GET /v1/sagas")
        if "Link" in r.headers or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    first = [s["saga_id"] for s in r.json()["items"]]
    link = r.headers["Link"]
    assert link.startswith("</v1/sagas?before=") and link.endswith('&limit=2>; rel="next"')
    assert "&name=%s&" % name in link
    r = call("GET", link[1:link.index(">")], "admin", op="GET /v1/sagas")
    rest = [s["saga_id"] for s in r.json()["items"]]
    assert set(first) | set(rest) == ids and len(first) + len(rest) == 3
    assert "Link" not in r.headers


def test_approval_four_eyes():
    # Submitted by admin, who may approve too, but not its own saga.
    saga = call("POST", "/v1/sagas", "admin", op="POST /v1/sagas", json={
        "v": 1, "type": "saga.start", "name": "charge",
        "steps": [{"name": "charge", "tool": "payment.charge_high",
                   "args": {"amount_cents": 125000}}]}).json()
    path = saga["links"]["self"]
    env = wait_until(path, "admin", ["awaiting_approval"])
    assert env["steps"][0]["approval"] == {"registry": True}

    inbox = call("GET", "/v1/approvals", "approver", op="GET /v1/approvals").json()["items"]
    assert [i["step_name"] for i in inbox if i["saga_id"] == saga["saga_id"]] == ["charge"]
    inbox = call("GET", "/v1/approvals", "admin", op="GET /v1/approvals").json()["items"]
    assert saga["saga_id"] not in [i["saga_id"] for i in inbox]
    r = call("POST", path + "/steps/charge/approve", "admin",
             op="POST /v1/sagas/{id}/steps/{step}/approve", json={"reason": "mine"})
    assert problem(r, 403)["code"] == "input.auth.self_approval"
    r = call("POST", path + "/steps/charge/approve", "submitter",
             op="POST /v1/sagas/{id}/steps/{step}/approve", json={"reason": "not mine"})
    problem(r, 403)
    # By index; the worker's decision within wait (gateway.wait_max_ms
    # caps it), else 202.
    r = call("POST", path + "/steps/0/approve?wait=10s", "approver",
             op="POST /v1/sagas/{id}/steps/{step}/approve", json={"reason": "checked"})
    assert r.status_code in (200, 202), r.text
    assert wait_until(path, "admin", ["ok", "error"])["status"] == "ok"
    r = call("POST", path + "/steps/charge/reject", "approver",
             op="POST /v1/sagas/{id}/steps/{step}/reject", json={"reason": "late"})
    assert problem(r, 409)["code"] == "input.step.not_awaiting_approval"
