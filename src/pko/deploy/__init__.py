"""Generators for what ships under ``deploy/``: the Helm chart's copy of the CRDs and the quickstart manifest.

Outside the runtime layers: nothing in the operator or the agent imports this package.
"""
