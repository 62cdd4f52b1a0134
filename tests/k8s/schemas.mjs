// Validates every object of rendered Kubernetes YAML against the API
// schemas of its apiVersion and kind: the Kubernetes API (kubernetes-models),
// KEDA and prometheus-operator CRDs, and the CRDs no model package covers
// (Strimzi's KafkaUser) from a JSON Schema of ours in crds/, named
// GROUP_VERSION_KIND.json.  An object of a kind none of them knows is an
// error, so nothing goes unvalidated.
//
//   node tests/k8s/schemas.mjs RENDERED.yaml...
import { existsSync, readFileSync } from "node:fs";
import Ajv from "ajv";
import { parseAllDocuments } from "yaml";

// Where each API group's models live.
const packages = [
  "kubernetes-models",
  "@kubernetes-models/keda",
  "@kubernetes-models/prometheus-operator",
];

// A model-like validator from crds/: new model(obj).validate() throws with
// ajv's errors, as a kubernetes-models model does.
const ajv = new Ajv({ allErrors: true, strict: true });
function crdModel(apiVersion, kind) {
  const file = new URL(`crds/${apiVersion.replace("/", "_")}_${kind}.json`, import.meta.url);
  if (!apiVersion.includes("/") || !existsSync(file)) return null;
  const check = ajv.compile(JSON.parse(readFileSync(file, "utf8")));
  return class {
    constructor(obj) { this.obj = obj; }
    validate() {
      if (!check(this.obj)) throw Object.assign(new Error("invalid"), { errors: check.errors });
    }
  };
}

async function modelFor(apiVersion, kind) {
  const path = apiVersion.includes("/") ? apiVersion : `v1`;
  const crd = crdModel(apiVersion, kind);
  if (crd) return { model: crd, pkg: "crds" };
  for (const pkg of packages) {
    try {
      const mod = await import(`${pkg}/${path}/${kind}`);
      if (mod[kind]) return { model: mod[kind], pkg };
    } catch (e) {
      if (e.code !== "ERR_MODULE_NOT_FOUND" && e.code !== "ERR_PACKAGE_PATH_NOT_EXPORTED") throw e;
    }
  }
  return null;
}

let failures = 0;
let checked = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    if (doc.errors.length) {
      console.error(`${file}: YAML: ${doc.errors[0].message}`);
      failures++;
      continue;
    }
    const obj = doc.toJSON();
    if (!obj) continue;
    const what = `${file}: ${obj.kind} ${obj.metadata?.name} (${obj.apiVersion})`;
    const found = await modelFor(obj.apiVersion, obj.kind);
    if (!found) {
      console.error(`${what}: no schema known for this apiVersion and kind`);
      failures++;
      continue;
    }
    try {
      new found.model(obj).validate();
      checked++;
    } catch (e) {
      const errors = e.errors ?? [{ instancePath: "", message: e.message }];
      for (const err of errors)
        console.error(`${what}: ${err.instancePath || "/"}: ${err.message}` +
          (err.params?.missingProperty ? ` (${err.params.missingProperty})` : ""));
      failures++;
    }
  }
}
if (failures) {
  console.error(`k8s schemas: ${failures} object(s) invalid`);
  process.exit(1);
}
console.log(`k8s schemas: ${checked} objects valid (kubernetes-models, KEDA, prometheus-operator, crds/)`);
