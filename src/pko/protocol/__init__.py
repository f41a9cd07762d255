"""The workspace agent's wire contract, shared by the two processes that speak it: the operator and the agent.

Wire-compatible with the Go agent of the Pulumi Kubernetes Operator v2.9 (``package agent``, ``service
AutomationService``). Map of the package:

- ``proto/`` — ``agent.proto`` and its generated code, with mypy-protobuf's typed stubs (``protogen`` regenerates
  them all; a unit test proves they match the ``.proto``);
- ``client`` — the typed client stub the operator calls, and the structured error a failed call may carry;
- ``status`` — the ``google.rpc.Status`` trailer (``grpc-status-details-bin``) holding a ``PulumiErrorInfo``.

This is a low layer: it imports neither the agent (the server, :mod:`pko.agent`) nor the controllers (the client
side, :mod:`pko.controllers`), which are independent of each other and meet only here.
"""
