"""A chain of resources, each taking `delay` seconds to create, so an update can be interrupted half-way."""

import time

import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider


class SlowProvider(ResourceProvider):
    def create(self, props):
        time.sleep(float(props["delay"]))
        return CreateResult(id_=props["name"], outs=props)

    def delete(self, _id, _props):
        pass


class Slow(Resource):
    def __init__(self, name, delay, opts=None):
        super().__init__(SlowProvider(), name, {"name": name, "delay": delay}, opts)


config = pulumi.Config()
delay = config.get_float("delay") or 4.0
previous = None
for i in range(config.get_int("count") or 4):
    previous = Slow(f"step-{i}", delay, pulumi.ResourceOptions(depends_on=[previous] if previous else []))
pulumi.export("steps", config.get_int("count") or 4)
