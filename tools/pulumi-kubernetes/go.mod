module pko.local/tools/pulumi-kubernetes

go 1.25

// The Kubernetes provider the real-program tests download from the plugin mirror. The proxy serves this module only
// as a pseudo-version (2026-01-15, between the 4.23.0 and 4.24.1 releases); tools/build.sh builds it from a copy of
// the module (its schema is generated into the copy first) and stamps it 4.24.1, the @pulumi/kubernetes version the
// programs use.
require github.com/pulumi/pulumi-kubernetes/provider/v4 v4.0.0-20260115033456-f47bc2d6f199
