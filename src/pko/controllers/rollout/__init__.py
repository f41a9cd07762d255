"""The StackRollout controller (pko, docs/rollouts.md): a pure plan (``plan``), the gates' checks (``gates``), the
executor (``reconciler``) and its wiring (``setup``)."""
