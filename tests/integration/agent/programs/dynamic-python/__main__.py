"""Writes one real file through a dynamic provider and exports every config value it was given."""

import os

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult


class FileProvider(ResourceProvider):
    def create(self, props):
        with open(props["path"], "w") as handle:
            handle.write(props["content"])
        return CreateResult(id_=props["path"], outs=props)

    def read(self, id_, props):
        content = props.get("content")
        if os.path.exists(id_):
            with open(id_) as handle:
                content = handle.read()
        return ReadResult(id_=id_, outs={**props, "content": content})

    def diff(self, _id, olds, news):
        return DiffResult(changes=olds.get("content") != news.get("content"),
                          replaces=["path"] if olds.get("path") != news.get("path") else [])

    def update(self, _id, _olds, news):
        with open(news["path"], "w") as handle:
            handle.write(news["content"])
        return UpdateResult(outs=news)

    def delete(self, _id, props):
        if os.path.exists(props["path"]):
            os.remove(props["path"])


class File(Resource):
    path: pulumi.Output[str]
    content: pulumi.Output[str]

    def __init__(self, name, path, content, opts=None):
        super().__init__(FileProvider(), name, {"path": path, "content": content}, opts)


config = pulumi.Config()
target = File("greeting", path=config.require("path"), content=config.require("greeting"))
pulumi.export("path", target.path)
pulumi.export("content", target.content)
pulumi.export("token", config.require_secret("token"))
pulumi.export("tags", config.require_object("tags"))
pulumi.export("settings", config.require_object("settings"))
pulumi.export("replicas", config.require_int("replicas"))
pulumi.export("fromEnv", config.require("fromEnv"))
pulumi.export("fromFile", config.require_secret("fromFile"))
