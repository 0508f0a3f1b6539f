"""Runtime half of the SNI peer demux: the routes come from the cluster, not from the stack file.

`demux.routes` turns the account peer Services of the Kura namespace into the nginx map entries
(pure); `demux.reconciler` watches those Services and writes the entries into the region's routes
ConfigMap; `nginx-reload.sh` runs in each demux pod next to nginx and reloads it gracefully when
the mounted ConfigMap changes. `python -m demux` runs the reconciler in the cluster.
"""
