"""Runtime failover watcher: keeps a region's failover IP on a healthy box (seed 000).

`watcher.decision` is the pure placement rule; `watcher.loop` polls Kubernetes and asks a
`Mover` (the vendor failover API) to act; `python -m watcher` runs it in the cluster.
"""
