"""A Pulumi program whose only resource is a real file, managed by a dynamic provider."""

import os

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider


class FileProvider(ResourceProvider):
    def create(self, props):
        with open(props["path"], "w") as handle:
            handle.write(props["content"])
        return CreateResult(id_=props["path"], outs=props)

    def diff(self, _id, olds, news):
        changed = olds.get("content") != news.get("content") or olds.get("path") != news.get("path")
        return DiffResult(changes=changed, replaces=["path"] if olds.get("path") != news.get("path") else [])

    def update(self, _id, _olds, news):
        with open(news["path"], "w") as handle:
            handle.write(news["content"])
        from pulumi.dynamic import UpdateResult

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
target = File("greeting", path=config.require("path"), content=config.get("content") or "hello")
pulumi.export("path", target.path)
pulumi.export("content", target.content)
pulumi.export("token", pulumi.Output.secret(config.require_secret("token")))
