"""The dependency cache: a pull-through cache of provider plugins, npm packages and Go modules that the operator
serves to its workspace pods on the Program file server's listener (``/cache/<part>/...``).

Why: every workspace pod starts empty. Without a cache each one downloads every provider plugin again (tens to
hundreds of MB each) and every package of its lockfile, at every cold start, every new commit and every wake from
scale-to-zero; the Go operator's users are told to bake plugins into custom images instead. With the cache, the
first pod's download is the last one from the upstream; later pods get the same bytes from the operator.

Safe to share between tenants because only the operator writes it, and only with what it fetched from the
upstreams the platform team configured (never a URL a Stack names): a pod can read the cache but never put
anything into it (GET only). Stored files are content-addressed (sha256) and written atomically; clients verify
what they get as they do from the upstream (npm's integrity, go.sum, the CLI's plugin checksums).
"""
