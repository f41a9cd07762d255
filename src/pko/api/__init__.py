"""Typed models of the CRDs, their names, labels and conditions, and CRD manifest generation.

Pure: no I/O, no imports of other pko layers.
"""
