"""Fixtures of the cluster tier: a real single-node Kubernetes cluster (`pko.testing.cluster`) with the images
`make images` built, pko installed into it with its Helm chart, and a git server that pods reach (all from
`pko.testing.clusterbed`).

The cluster is the run's one cluster, shared with the interop tier, which runs right after this one
(`clusterbed.pytest_collection_modifyitems`, registered here). Tests here run in file order: `test_00_*` and
`test_05_*` boot clusters of their own before the shared one starts, `test_90_*` upgrades and uninstalls the shared
operator last; the interop tier then gets the cluster emptied (`clusterbed.hand_over`).
"""

from pko.testing.clusterbed import (
    built_images,
    cache_upstream,
    ckc,
    cnamespace,
    operator_release,
    pod_git,
    pod_store,
    pytest_collection_modifyitems,
    real_cluster,
)

__all__ = ["built_images", "cache_upstream", "ckc", "cnamespace", "operator_release", "pod_git", "pod_store",
           "pytest_collection_modifyitems", "real_cluster"]
