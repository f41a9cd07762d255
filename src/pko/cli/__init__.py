"""Command-line entry points: `pko operator`, `pko agent`, `pko crds`, `pko dev`."""
