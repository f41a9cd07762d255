"""Fixtures of the cluster tier: a real single-node Kubernetes cluster (`pko.testing.cluster`) with the images
`make images` built, pko installed into it with its Helm chart, and a git server that pods reach (all from
`pko.testing.clusterbed`, which the interop tier shares).

The cluster lives for this package only. Tests here run in file order: `test_00_*` checks teardown before the
shared cluster exists, `test_90_*` upgrades and uninstalls the shared operator last.
"""

from pko.testing.clusterbed import built_images, ckc, cnamespace, operator_release, pod_git, real_cluster

__all__ = ["built_images", "ckc", "cnamespace", "operator_release", "pod_git", "real_cluster"]
