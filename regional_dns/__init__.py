"""Runtime half of a region's public DNS: the wildcard `*.<region host>` follows the healthy gateways.

`regional_dns.records` decides, from the region's Nodes and gateway pods, which addresses the
wildcard points at (pure); `regional_dns.reconciler` reads those from the cluster every 30 s and
writes the region's DNSEndpoint `kura-regional-<region>-dns` when the records change, keeping them
as they are whenever a read fails. `python -m regional_dns` runs it in the cluster
(components/dns_reconciler.py deploys it; external-dns publishes what it writes).
"""
