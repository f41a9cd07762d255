"""The stack, workspace, update and program controllers: pure plans plus thin executors."""
