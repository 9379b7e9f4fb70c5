#!/bin/bash
# cgrun.sh PREFIX ROOT SCRIPT [args]: on/off x N=100/300 callgrind runs
pre=$1; root=$2; script=$3; shift 3
for k in on off; do for n in 100 300; do
 ROOT=$root N=$n valgrind --tool=callgrind --cache-sim=yes --LL=2097152,16,64 --toggle-collect=starmap_next --callgrind-out-file=$pre.$k.$n /work/main/.venv/bin/python $script $k "$@" > /dev/null 2>&1
done; done
echo done $pre
