"""Generated protobuf and gRPC code for the workspace agent protocol (``agent.proto``).

Never edit the ``*_pb2*`` modules by hand: change ``agent.proto`` and run ``python -m pko.protocol.protogen``.
"""
