"""The Workspace controller: a Workspace becomes a running agent (a StatefulSet pod, or local processes)."""
