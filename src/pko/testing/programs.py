"""Real Pulumi programs, as users write them: TypeScript, Python and Go programs that use a provider plugin.

Their packages and plugins are what the package mirror carries (:mod:`pko.testing.mirrorfill` mirrors the
closure of the roots below; :mod:`pko.testing.mirror` serves it), so a workspace pod installs them the way a
user's pod does: ``npm install``, a virtualenv from pip, ``go build``, and the provider plugin downloaded by the
Pulumi CLI. The cluster tier and the benchmark (``python -m bench --program``) run them from Git.
"""

from __future__ import annotations

import json

RANDOM_VERSION = "4.19.1"
PULUMI_SDK_VERSION = "3.259.0"
TYPESCRIPT_VERSION = "5.9.3"
#: @pulumi/kubernetes, and the version `make tools` stamps on the Kubernetes provider plugin it builds (the package's
#: install script and the SDK ask the plugin mirror for exactly this version)
KUBERNETES_VERSION = "4.24.1"

NPM_ROOTS = {
    "@pulumi/pulumi": PULUMI_SDK_VERSION,
    "@pulumi/random": RANDOM_VERSION,
    "@pulumi/kubernetes": KUBERNETES_VERSION,
    "typescript": TYPESCRIPT_VERSION,
}
# The venv the Python host makes also upgrades pip, setuptools and wheel from the index.
PYPI_ROOTS = [f"pulumi=={PULUMI_SDK_VERSION}", f"pulumi_random=={RANDOM_VERSION}", "pip", "setuptools", "wheel"]

GO_MOD = f"""module randomprog

go 1.25

require (
\tgithub.com/pulumi/pulumi-random/sdk/v4 v{RANDOM_VERSION}
\tgithub.com/pulumi/pulumi/sdk/v3 v{PULUMI_SDK_VERSION}
)
"""
GO_MAIN = """package main

import (
\t"github.com/pulumi/pulumi-random/sdk/v4/go/random"
\t"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
\t"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
)

func main() {
\tpulumi.Run(func(ctx *pulumi.Context) error {
\t\tlength := config.GetInt(ctx, "length")
\t\tif length == 0 {
\t\t\tlength = 12
\t\t}
\t\ts, err := random.NewRandomString(ctx, "token", &random.RandomStringArgs{
\t\t\tLength:  pulumi.Int(length),
\t\t\tSpecial: pulumi.Bool(false),
\t\t})
\t\tif err != nil {
\t\t\treturn err
\t\t}
\t\tctx.Export("token", s.Result)
\t\tctx.Export("language", pulumi.String("go"))
\t\treturn nil
\t})
}
"""

TYPESCRIPT_INDEX = """import * as pulumi from "@pulumi/pulumi";
import * as random from "@pulumi/random";

const config = new pulumi.Config();
const pet = new random.RandomPet("pet", { length: config.getNumber("length") ?? 2 });
const suffix = new random.RandomInteger("suffix", { min: 1000, max: 9999 });

export const petName = pet.id;
export const suffixValue = suffix.result;
export const language = "typescript";
"""
TSCONFIG = json.dumps({"compilerOptions": {"strict": True, "outDir": "bin", "target": "es2020", "module": "commonjs",
                                           "moduleResolution": "node", "sourceMap": True,
                                           "experimentalDecorators": True, "forceConsistentCasingInFileNames": True},
                       "files": ["index.ts"]}, indent=2) + "\n"


# Kubernetes objects in the Stack's namespace, through the workspace ServiceAccount's own RBAC (in-cluster config):
# a ConfigMap `<app>-settings` and a Deployment `<app>` that the provider waits for until it is ready. Config:
# `namespace`, `app` (names and labels the objects, so that several Stacks share a namespace), `image` (a local
# image the node has), `greeting` (the ConfigMap's data, and an output). The pod spec passes the `restricted` profile.
KUBERNETES_INDEX = """import * as pulumi from "@pulumi/pulumi";
import * as k8s from "@pulumi/kubernetes";
import * as random from "@pulumi/random";

const config = new pulumi.Config();
const namespace = config.require("namespace");
const app = config.require("app");
export const greeting = config.get("greeting") ?? "hello";
const labels = { app };
const pet = new random.RandomPet("pet", { length: 2 });

const settings = new k8s.core.v1.ConfigMap("settings", {
    metadata: { name: `${app}-settings`, namespace, labels },
    data: { greeting, pet: pet.id },
});
const deployment = new k8s.apps.v1.Deployment("app", {
    metadata: { name: app, namespace, labels },
    spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
            metadata: { labels },
            spec: {
                automountServiceAccountToken: false,
                securityContext: { runAsNonRoot: true, runAsUser: 65535, seccompProfile: { type: "RuntimeDefault" } },
                containers: [{
                    name: "app",
                    image: config.require("image"),
                    imagePullPolicy: "IfNotPresent",
                    securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
                    resources: { requests: { cpu: "1m", memory: "4Mi" } },
                }],
            },
        },
    },
});

export const configMap = settings.metadata.name;
export const readyReplicas = deployment.status.readyReplicas;
export const petName = pet.id;
export const language = "typescript";
"""


def typescript(name: str = "tsprog", *, index: str = TYPESCRIPT_INDEX,
               dependencies: dict[str, str] | None = None) -> dict[str, str]:
    """A TypeScript program's files (no lockfile: npm resolves from the registry it is pointed at); `index` and
    `dependencies` make it another program (:func:`typescript_kubernetes`)."""
    deps = {"@pulumi/pulumi": PULUMI_SDK_VERSION, "@pulumi/random": RANDOM_VERSION, **(dependencies or {})}
    package = {"name": name, "main": "index.ts", "devDependencies": {"typescript": TYPESCRIPT_VERSION},
               "dependencies": deps}
    return {
        "Pulumi.yaml": f"name: {name}\nruntime:\n  name: nodejs\n  options:\n    packagemanager: npm\n",
        "package.json": json.dumps(package, indent=2) + "\n",
        "tsconfig.json": TSCONFIG,
        "index.ts": index,
    }


def typescript_kubernetes(name: str = "k8sprog") -> dict[str, str]:
    """The TypeScript program of :data:`KUBERNETES_INDEX`, with @pulumi/kubernetes beside @pulumi/random."""
    return typescript(name, index=KUBERNETES_INDEX, dependencies={"@pulumi/kubernetes": KUBERNETES_VERSION})


PYTHON_MAIN = """import pulumi
import pulumi_random as random

number = random.RandomInteger("number", min=1, max=1_000_000)
pulumi.export("number", number.result)
pulumi.export("language", "python")
"""


def _pip_project(name: str) -> str:
    """A Python project file whose virtualenv `venv` `pulumi install` builds with pip."""
    return f"name: {name}\nruntime:\n  name: python\n  options:\n    toolchain: pip\n    virtualenv: venv\n"


def python(name: str = "pyprog") -> dict[str, str]:
    """A Python program with pulumi_random, whose virtualenv `pulumi install` builds with pip."""
    return {
        "Pulumi.yaml": _pip_project(name),
        "requirements.txt": f"pulumi>=3.0.0,<4.0.0\npulumi_random=={RANDOM_VERSION}\n",
        "__main__.py": PYTHON_MAIN,
    }


# Files on disk managed through a dynamic provider that can refresh (`read` returns what is on disk, and no id once
# the file is gone, which Pulumi reads as deleted): a provider-free program whose resources a test can see, change
# and delete behind Pulumi's back (drift), and whose destroy it can check. Config: `dir`, where the files are.
FILES_MAIN = '''import os

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult


class FileProvider(ResourceProvider):
    def create(self, props):
        with open(props["path"], "w") as handle:
            handle.write(props["content"])
        return CreateResult(id_=props["path"], outs=props)

    def read(self, id_, props):
        if not os.path.exists(props["path"]):
            return ReadResult(id_=None, outs={})
        with open(props["path"]) as handle:
            return ReadResult(id_=id_, outs={**props, "content": handle.read()})

    def diff(self, _id, olds, news):
        return DiffResult(changes=any(olds.get(k) != news.get(k) for k in ("path", "content")))

    def update(self, _id, _olds, news):
        with open(news["path"], "w") as handle:
            handle.write(news["content"])
        return UpdateResult(outs=news)

    def delete(self, _id, props):
        if os.path.exists(props["path"]):
            os.remove(props["path"])


class File(Resource):
    def __init__(self, name, props, opts=None):
        super().__init__(FileProvider(), name, props, opts)


config = pulumi.Config()
root = config.require("dir")
for name in ("alpha", "beta"):
    File(name, {"path": os.path.join(root, name + ".txt"), "content": name + " as declared"})
pulumi.export("dir", root)
'''


def python_files(name: str = "files") -> dict[str, str]:
    """:data:`FILES_MAIN` as a Python project whose virtualenv `pulumi install` builds with pip (the SDK only)."""
    return {
        "Pulumi.yaml": _pip_project(name),
        "requirements.txt": "pulumi>=3.0.0,<4.0.0\n",
        "__main__.py": FILES_MAIN,
    }


def go(go_sum: str, name: str = "goprog") -> dict[str, str]:
    """A Go program with the random provider's Go SDK (its go.sum is the one the mirror fill resolved)."""
    return {
        "Pulumi.yaml": f"name: {name}\nruntime: go\n",
        "go.mod": GO_MOD,
        "go.sum": go_sum,
        "main.go": GO_MAIN,
    }


def yaml_random_program() -> dict[str, object]:
    """A Program object's `program`: two random resources, so `spec.targets` can pick one. The provider version is
    pinned, as in any air-gapped program: without it the CLI asks GitHub for the latest release."""
    options = {"version": RANDOM_VERSION}
    return {
        "resources": {
            "picked": {"type": "random:RandomInteger", "properties": {"min": 1, "max": 100}, "options": options},
            "skipped": {"type": "random:RandomInteger", "properties": {"min": 1, "max": 100}, "options": options},
        },
        "outputs": {"picked": "${picked.result}"},
    }
