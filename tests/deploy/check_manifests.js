// Offline checks of deploy/k8s: every kustomization renders (kustomize_lite.js; and the same
// through `kubectl kustomize` when a kubectl is installed), every resource passes the Kubernetes
// OpenAPI schema of its apiVersion/kind (kubernetes-models), and the pieces agree with each other
// and with the Dockerfile: ports, probes, drain timing, selectors, the HPA's metric and the
// prometheus-adapter rule that serves it. Usage: node check_manifests.js SOURCE_DIR
"use strict";
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const YAML = require("yaml");
const { render } = require("./kustomize_lite.js");

const source = path.resolve(process.argv[2]);
const k8s = path.join(source, "deploy/k8s");
const errors = [];
const check = (ok, message) => { if (!ok) errors.push(message); };

function modelFor(r) {
  const group = r.apiVersion.includes("/") ? r.apiVersion : `v1`;
  const file = path.join(path.dirname(require.resolve("kubernetes-models/package.json")), group, `${r.kind}.js`);
  if (!fs.existsSync(file)) throw new Error(`no schema for ${r.apiVersion} ${r.kind}`);
  return require(file)[r.kind];
}

function validateSchema(where, r) {
  try {
    const Model = modelFor(r);
    new Model(r).validate();
  } catch (e) {
    errors.push(`${where}: ${r.apiVersion} ${r.kind} ${r.metadata && r.metadata.name}: ${e.message}`);
  }
}

// What the Dockerfile's runtime stage says: EXPOSE ports and USER uid.
function dockerRuntime() {
  const text = fs.readFileSync(path.join(source, "Dockerfile"), "utf8");
  const runtime = text.slice(text.lastIndexOf("\nFROM "));
  const expose = (runtime.match(/^EXPOSE\s+(.+)$/m) || [, ""])[1].trim().split(/\s+/).map(Number);
  const user = Number((runtime.match(/^USER\s+(\d+)/m) || [, NaN])[1]);
  return { expose, user };
}

function env(container, name) {
  const e = (container.env || []).find((x) => x.name === name);
  return e && e.value;
}

function checkApp(where, resources, adapterMetric) {
  const byKind = (kind) => resources.filter((r) => r.kind === kind);
  const [deploy] = byKind("Deployment");
  check(deploy, `${where}: no Deployment`);
  if (!deploy) return;
  const pod = deploy.spec.template;
  const podLabels = pod.metadata.labels || {};
  const matches = (sel) => sel && Object.entries(sel).every(([k, v]) => podLabels[k] === v);
  check(matches(deploy.spec.selector.matchLabels), `${where}: the Deployment's selector misses its pods`);
  const c = pod.spec.containers[0];
  const port = (name) => (c.ports || []).find((p) => p.name === name);
  const grpc = port("grpc"), metrics = port("metrics");
  check(grpc && metrics, `${where}: container ports grpc and metrics`);
  if (!grpc || !metrics) return;
  const docker = dockerRuntime();
  check(JSON.stringify(docker.expose) === JSON.stringify([grpc.containerPort, metrics.containerPort]),
    `${where}: Dockerfile EXPOSE ${docker.expose} != container ports ${grpc.containerPort} ${metrics.containerPort}`);
  check(env(c, "FRESNEL_LISTEN") === `0.0.0.0:${grpc.containerPort}`, `${where}: FRESNEL_LISTEN vs the grpc port`);
  check(env(c, "FRESNEL_METRICS") === `0.0.0.0:${metrics.containerPort}`, `${where}: FRESNEL_METRICS vs the metrics port`);
  check((c.env || []).some((e) => e.name === "FRESNEL_INSTANCE"), `${where}: FRESNEL_INSTANCE unset`);
  const sc = pod.spec.securityContext || {};
  check(sc.runAsNonRoot === true && sc.runAsUser === docker.user,
    `${where}: runAsNonRoot with runAsUser ${sc.runAsUser} = the image's USER ${docker.user}`);
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const p = c[probe];
    check(p && p.grpc && p.grpc.port === grpc.containerPort, `${where}: ${probe} must be a gRPC probe on ${grpc.containerPort}`);
  }
  const drain = Number(env(c, "FRESNEL_DRAIN_TIMEOUT"));
  check(drain > 0, `${where}: FRESNEL_DRAIN_TIMEOUT must be set`);
  // fresneld drains, then gives gRPC 2 s to stop (server/server.cc).
  check(pod.spec.terminationGracePeriodSeconds > drain + 2,
    `${where}: terminationGracePeriodSeconds ${pod.spec.terminationGracePeriodSeconds} <= drain ${drain} + 2 s`);
  const live = c.livenessProbe || {};
  check((live.periodSeconds || 10) * (live.failureThreshold || 3) > drain,
    `${where}: liveness would kill a pod that is still draining`);
  check((c.readinessProbe || {}).failureThreshold === 1, `${where}: readiness should drop at the first NOT_SERVING`);
  const gpuReq = c.resources.requests["nvidia.com/gpu"], gpuLim = c.resources.limits["nvidia.com/gpu"];
  check(gpuReq >= 1 && gpuReq === gpuLim, `${where}: nvidia.com/gpu requests ${gpuReq} must equal limits ${gpuLim}`);
  const ann = pod.metadata.annotations || {};
  check(ann["prometheus.io/scrape"] === "true" && Number(ann["prometheus.io/port"]) === metrics.containerPort &&
    ann["prometheus.io/path"] === "/metrics", `${where}: pod scrape annotations`);

  const services = byKind("Service");
  const headless = services.find((s) => s.spec.clusterIP === "None");
  check(headless && matches(headless.spec.selector) && headless.spec.ports.some((p) => p.targetPort === "grpc"),
    `${where}: a headless Service selecting the pods on the grpc port`);
  check(headless && !headless.spec.publishNotReadyAddresses, `${where}: the headless Service must leave out pods that are not ready`);
  const metricsSvc = services.find((s) => s.spec.ports.some((p) => p.targetPort === "metrics"));
  check(metricsSvc && matches(metricsSvc.spec.selector) &&
    (metricsSvc.metadata.annotations || {})["prometheus.io/port"] === String(metrics.containerPort),
    `${where}: a metrics Service with scrape annotations`);
  const [pdb] = byKind("PodDisruptionBudget");
  check(pdb && matches(pdb.spec.selector.matchLabels), `${where}: a PodDisruptionBudget selecting the pods`);
  const [hpa] = byKind("HorizontalPodAutoscaler");
  check(hpa && hpa.apiVersion === "autoscaling/v2", `${where}: an autoscaling/v2 HorizontalPodAutoscaler`);
  if (hpa) {
    check(hpa.spec.scaleTargetRef.kind === "Deployment" && hpa.spec.scaleTargetRef.name === deploy.metadata.name,
      `${where}: the HPA must scale the Deployment`);
    check(hpa.spec.minReplicas <= hpa.spec.maxReplicas, `${where}: HPA minReplicas > maxReplicas`);
    const m = hpa.spec.metrics.find((x) => x.type === "Pods");
    check(m && m.pods.metric.name === adapterMetric,
      `${where}: the HPA's Pods metric must be ${adapterMetric} (the prometheus-adapter rule)`);
  }
  return { deploy, pod, c };
}

// kubectl's own kustomize, when one is installed: the same resources, field for field.
function compareWithKubectl(dir, mine) {
  let text;
  try {
    text = execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    if (e.code === "ENOENT") return "skipped (no kubectl)";
    errors.push(`kubectl kustomize ${dir}: ${e.stderr || e.message}`);
    return "failed";
  }
  const theirs = YAML.parseAllDocuments(text).map((d) => d.toJS()).filter(Boolean);
  const key = (r) => `${r.kind}/${r.metadata.name}`;
  const norm = (list) => JSON.stringify(list.map((r) => [key(r), r]).sort((a, b) => a[0].localeCompare(b[0])),
    (k, v) => (v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort()) : v));
  check(norm(mine) === norm(theirs), `${dir}: kustomize_lite and kubectl kustomize disagree`);
  return "same as kubectl kustomize";
}

const adapterDocs = render(path.join(k8s, "prometheus-adapter"));
const adapterRules = YAML.parse(adapterDocs[0].data["config.yaml"]).rules;
const adapterMetric = adapterRules[0].name.as;
check(/fresnel_queue_wait_seconds/.test(adapterRules[0].seriesQuery), "the adapter rule must read fresnel_queue_wait_seconds");
const dirs = { base: path.join(k8s, "base"), "overlays/single-gpu": path.join(k8s, "overlays/single-gpu"),
  "overlays/multi-gpu": path.join(k8s, "overlays/multi-gpu"), "prometheus-adapter": path.join(k8s, "prometheus-adapter") };
let count = 0;
for (const [name, dir] of Object.entries(dirs)) {
  const resources = name === "prometheus-adapter" ? adapterDocs : render(dir);
  for (const r of resources) validateSchema(name, r);
  count += resources.length;
  const how = compareWithKubectl(dir, resources);
  if (name !== "prometheus-adapter") {
    const app = checkApp(name, resources, adapterMetric);
    if (name.startsWith("overlays/")) {
      check(resources.every((r) => r.metadata.namespace === "fresnel"), `${name}: every resource in namespace fresnel`);
    }
    if (app && name === "overlays/single-gpu") {
      const anti = (((app.pod.spec.affinity || {}).podAntiAffinity || {}).requiredDuringSchedulingIgnoredDuringExecution || [])[0];
      check(anti && anti.topologyKey === "kubernetes.io/hostname", `${name}: one pod per node (hostname anti-affinity)`);
    }
    if (app && name === "overlays/multi-gpu") {
      check(app.c.resources.requests["nvidia.com/gpu"] === 1, `${name}: one GPU per pod`);
      check((app.pod.spec.topologySpreadConstraints || []).length > 0, `${name}: pods spread over nodes`);
    }
  }
  console.log(`${name}: ${resources.length} resources rendered and schema-checked; ${how}`);
}
// Every manifest file is part of some rendering (none lies about unchecked).
const rendered = new Set();
(function walk(d) {
  for (const f of fs.readdirSync(d)) {
    const p = path.join(d, f);
    if (fs.statSync(p).isDirectory()) walk(p);
    else if (/\.ya?ml$/.test(f) && f !== "kustomization.yaml") rendered.add(path.relative(k8s, p));
  }
})(k8s);
for (const dir of Object.values(dirs)) {
  const k = YAML.parse(fs.readFileSync(path.join(dir, "kustomization.yaml"), "utf8"));
  for (const r of k.resources || []) rendered.delete(path.relative(k8s, path.join(dir, r)));
}
check(rendered.size === 0, `manifests that no kustomization lists: ${[...rendered].join(", ")}`);
if (errors.length) {
  console.log(`FAIL:\n  ${errors.join("\n  ")}`);
  process.exit(1);
}
console.log(`${count} resources checked`);
