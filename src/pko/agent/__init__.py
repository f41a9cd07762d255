"""The workspace agent: the AutomationService gRPC server, its auth, and `agent init`."""
