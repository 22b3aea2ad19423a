// A small kustomize: renders the subset of kustomization.yaml that deploy/k8s uses (resources,
// namespace, labels, JSON 6902 patches with a kind/name target) and refuses any other field, so
// that an overlay cannot silently mean more here than it does to `kubectl kustomize`. (Debian 12
// packages no kustomize; check_manifests.js also compares with `kubectl kustomize` when a kubectl
// is installed.)
"use strict";
const fs = require("fs");
const path = require("path");
const YAML = require("yaml");

const KNOWN = new Set(["apiVersion", "kind", "resources", "namespace", "labels", "patches"]);

function readDocs(file) {
  return YAML.parseAllDocuments(fs.readFileSync(file, "utf8")).map((d) => {
    if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
    return d.toJS();
  }).filter((d) => d !== null);
}

function pointer(p) {
  if (!p.startsWith("/")) throw new Error(`patch path '${p}' must start with /`);
  return p.slice(1).split("/").map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function applyOp(doc, op, where) {
  const keys = pointer(op.path);
  const last = keys.pop();
  let parent = doc;
  for (const k of keys) {
    if (parent === null || typeof parent !== "object" || !(k in parent)) {
      throw new Error(`${where}: ${op.op} ${op.path}: /${k} does not exist`);
    }
    parent = parent[k];
  }
  const isArray = Array.isArray(parent);
  const index = isArray ? (last === "-" ? parent.length : Number(last)) : last;
  if (isArray && !(Number.isInteger(index) && index >= 0 && index <= parent.length)) {
    throw new Error(`${where}: ${op.op} ${op.path}: bad array index`);
  }
  const exists = isArray ? index < parent.length : Object.prototype.hasOwnProperty.call(parent, index);
  switch (op.op) {
    case "add":
      if (isArray) parent.splice(index, 0, op.value);
      else parent[index] = op.value;
      break;
    case "replace":
      if (!exists) throw new Error(`${where}: replace ${op.path}: nothing to replace`);
      parent[index] = op.value;
      break;
    case "remove":
      if (!exists) throw new Error(`${where}: remove ${op.path}: nothing to remove`);
      if (isArray) parent.splice(index, 1);
      else delete parent[index];
      break;
    default:
      throw new Error(`${where}: unsupported patch op '${op.op}'`);
  }
}

// Renders the kustomization in `dir`; returns the list of resources.
function render(dir) {
  const kfile = path.join(dir, "kustomization.yaml");
  const [k] = readDocs(kfile);
  for (const key of Object.keys(k)) {
    if (!KNOWN.has(key)) throw new Error(`${kfile}: field '${key}' is not supported by kustomize_lite`);
  }
  if (k.apiVersion !== "kustomize.config.k8s.io/v1beta1" || k.kind !== "Kustomization") {
    throw new Error(`${kfile}: not a kustomize.config.k8s.io/v1beta1 Kustomization`);
  }
  let out = [];
  for (const r of k.resources || []) {
    const p = path.join(dir, r);
    if (fs.statSync(p).isDirectory()) out = out.concat(render(p));
    else out = out.concat(readDocs(p));
  }
  for (const l of k.labels || []) {
    for (const key of Object.keys(l)) {
      if (key !== "pairs") throw new Error(`${kfile}: labels.${key} is not supported`);
    }
    for (const r of out) {
      r.metadata = r.metadata || {};
      r.metadata.labels = Object.assign({}, r.metadata.labels, l.pairs);
    }
  }
  for (const [i, p] of (k.patches || []).entries()) {
    const where = `${kfile} patches[${i}]`;
    const t = p.target || {};
    for (const key of Object.keys(t)) {
      if (key !== "kind" && key !== "name") throw new Error(`${where}: target.${key} is not supported`);
    }
    if (typeof p.patch !== "string" || p.path) throw new Error(`${where}: only inline JSON 6902 patches`);
    const ops = YAML.parse(p.patch);
    if (!Array.isArray(ops)) throw new Error(`${where}: the patch must be a JSON 6902 list of ops`);
    const hits = out.filter((r) => (!t.kind || r.kind === t.kind) && (!t.name || r.metadata.name === t.name));
    if (hits.length === 0) throw new Error(`${where}: the target matches no resource`);
    for (const r of hits) for (const op of ops) applyOp(r, op, where);
  }
  if (k.namespace) for (const r of out) r.metadata.namespace = k.namespace;
  return out;
}

module.exports = { render, readDocs };
