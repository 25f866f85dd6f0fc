export EXITPOLICY_CLUSTER_DIR=/tmp/upt EXITPOLICY_CLUSTER_ACCOUNTING=slurmdbd
C=/src/contrib/slurm/cluster
$C up 2 && $C exec sacctmgr -n list cluster format=cluster; $C down
