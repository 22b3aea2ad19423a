// Offline checks of the Dockerfile (no Docker engine here): dockerfile-utils' linter with every
// optional rule raised to an error; the build stage installs the project's packages only through
// scripts/deps.sh (one source of truth: the Dockerfile itself installs nothing but NVIDIA's CUDA
// toolkit, which deps.sh leaves out) and builds and tests with scripts/test.sh; the runtime stage
// installs nothing, runs as a numeric non-root user, exposes fresneld's default ports and checks
// health with `fresnel health`. Usage: node check_dockerfile.js SOURCE_DIR
"use strict";
const fs = require("fs");
const path = require("path");
const utils = require("dockerfile-utils");

const source = path.resolve(process.argv[2]);
const text = fs.readFileSync(path.join(source, "Dockerfile"), "utf8");
const errors = [];
const check = (ok, message) => { if (!ok) errors.push(message); };

const E = utils.ValidationSeverity.ERROR;
const settings = {
  deprecatedMaintainer: E, emptyContinuationLine: E, instructionCasing: E,
  instructionCmdMultiple: E, instructionEntrypointMultiple: E, instructionHealthcheckMultiple: E,
  instructionJSONInSingleQuotes: E, instructionWorkdirRelative: E,
};
for (const d of utils.validate(text, settings)) {
  errors.push(`Dockerfile:${d.range.start.line + 1}: ${d.message}`);
}

// Instructions with continuations joined and comments dropped, grouped by stage.
const lines = text.replace(/\\\n/g, " ").split("\n").filter((l) => l.trim() && !l.trim().startsWith("#"));
const stages = [];
for (const line of lines) {
  const [, op, rest] = line.trim().match(/^(\S+)\s*(.*)$/);
  if (op === "FROM") stages.push({ from: rest, ops: [] });
  else if (stages.length) stages[stages.length - 1].ops.push({ op, rest });
}
check(stages.length === 2, `two stages (build, runtime), found ${stages.length}`);
const [build, runtime] = stages;
const all = (stage, op) => stage.ops.filter((i) => i.op === op).map((i) => i.rest);

// Packages: every apt-get install is NVIDIA's CUDA toolkit; everything else comes from deps.sh.
const deps = fs.readFileSync(path.join(source, "scripts/deps.sh"), "utf8");
const depsPackages = new Set(deps.match(/packages=\(([^)]*)\)/)[1].split(/\s+/).filter(Boolean));
const installed = [];
for (const stage of stages) {
  for (const run of all(stage, "RUN")) {
    for (const m of run.matchAll(/apt-get install ([^&;|]*)/g)) {
      installed.push(...m[1].split(/\s+/).filter((w) => w && !w.startsWith("-")));
    }
  }
}
for (const p of installed) {
  const cuda = /^(cuda-|libcu)[a-z-]+-\$\{CUDA_PACKAGE_VERSION\}$/.test(p);
  check(cuda, `Dockerfile installs '${p}': only CUDA toolkit packages belong there, the rest in scripts/deps.sh`);
  check(!depsPackages.has(p), `'${p}' is installed by both the Dockerfile and scripts/deps.sh`);
}
check(installed.length > 0, "the build stage installs the CUDA toolkit (nvcc)");
check(deps.includes("CUDA is not installed here"), "scripts/deps.sh should still leave CUDA out");

// Build stage: deps.sh (copied alone first), then the README's test command, then install.
const buildRuns = all(build, "RUN").join("\n");
check(/\bbash scripts\/deps\.sh\b/.test(buildRuns), "the build stage runs bash scripts/deps.sh");
check(/\bbash scripts\/test\.sh\b/.test(buildRuns), "the build stage builds and tests with bash scripts/test.sh");
check(/cmake --install/.test(buildRuns), "the build stage installs with cmake --install");
const readme = fs.readFileSync(path.join(source, "README.md"), "utf8");
check(readme.includes("bash scripts/test.sh"), "README's command is bash scripts/test.sh");
for (const copy of all(build, "COPY")) {
  const parts = copy.split(/\s+/).filter((p) => !p.startsWith("--"));
  for (const src of parts.slice(0, -1)) {
    if (src !== ".") check(fs.existsSync(path.join(source, src)), `COPY ${src}: no such file`);
  }
}
const depsCopy = build.ops.findIndex((i) => i.op === "COPY" && i.rest.startsWith("scripts/deps.sh"));
const depsRun = build.ops.findIndex((i) => i.op === "RUN" && /scripts\/deps\.sh/.test(i.rest));
const copyAll = build.ops.findIndex((i) => i.op === "COPY" && /^\.\s/.test(i.rest));
check(depsCopy >= 0 && depsCopy < depsRun && depsRun < copyAll,
  "deps.sh is copied and run before the whole tree is copied (its layer caches)");
check(/ AS build$/i.test(build.from), "the first stage is named build");

// Runtime stage.
check(!all(runtime, "RUN").some((r) => /apt-get|dpkg -i|apk |pip /.test(r)), "the runtime stage installs no packages");
check(all(runtime, "COPY").every((c) => c.startsWith("--from=build ")), "the runtime stage copies only from the build stage");
const user = all(runtime, "USER").pop() || "";
check(/^[1-9]\d*(:[1-9]\d*)?$/.test(user), `runtime USER '${user}' must be a numeric non-root uid`);
const config = fs.readFileSync(path.join(source, "server/config.h"), "utf8");
const defaultPort = (field) => Number(config.match(new RegExp(`std::string ${field} = "[^:"]*:(\\d+)"`))[1]);
const expose = all(runtime, "EXPOSE").join(" ").split(/\s+/).map(Number);
check(JSON.stringify(expose) === JSON.stringify([defaultPort("listen"), defaultPort("metrics")]),
  `EXPOSE ${expose} must be fresneld's default gRPC and metrics ports`);
const health = all(runtime, "HEALTHCHECK").join(" ");
check(/CMD \["fresnel",.*"health"\]/.test(health), "HEALTHCHECK runs `fresnel health` (exec form)");
const cli = fs.readFileSync(path.join(source, "client/cli/cli.cc"), "utf8");
check(cli.includes('add_subcommand(\n      "health"') || cli.includes('add_subcommand("health"'), "the CLI has a health command");
check(/^\["fresneld"/.test(all(runtime, "ENTRYPOINT").pop() || ""), "ENTRYPOINT is fresneld (exec form, gets SIGTERM)");
const ignore = fs.readFileSync(path.join(source, ".dockerignore"), "utf8");
for (const p of ["build*", "**/node_modules", ".git"]) check(ignore.split("\n").includes(p), `.dockerignore leaves out ${p}`);

if (errors.length) {
  console.log(`FAIL:\n  ${errors.join("\n  ")}`);
  process.exit(1);
}
console.log(`Dockerfile: lint clean, ${installed.length} CUDA packages + scripts/deps.sh (${depsPackages.size} packages), runtime stage checked`);
