"""`kubectl pko` (also `pko ctl`): operating a fleet of Stacks from a terminal or a script.

:mod:`.view` holds the pure parts (a Stack's state, its next retry, tables, selection of what a command touches,
the describe text); :mod:`.app` parses the command line and does the API calls through :mod:`pko.kube`. Nothing
here decides what the operator does: the rules (backoff, stall) are the Stack controller's, imported.
"""
