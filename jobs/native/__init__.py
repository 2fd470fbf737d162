"""Work that does not come through the portal: external jobs and their sources, Slurm and Kubernetes
import, and the account, queue and ResourceQuota syncs that carry the quota tree to the clusters."""
