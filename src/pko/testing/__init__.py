"""Test bed built from real parts: a local control plane, the real Pulumi CLI, a loopback git server.

Shared by the integration and end-to-end tests and by ``pko dev``; nothing here mocks the systems it stands up.
"""
