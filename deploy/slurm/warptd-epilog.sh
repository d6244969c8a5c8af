#!/bin/sh
# Slurm epilog: write the joules that warptd (--workloads) measured for the ending job on this node
# into the job's AdminComment, as warptd_joules_<node>=<J>. See docs/workloads.md.
#
#   slurm.conf:  Epilog=/etc/slurm/epilog.d/*      (install this file there, mode 0755)
#
# It asks the local daemon (loopback; $WARPTD_URL and $WARPTD_STRESS_TOKEN as for `warptd workload`),
# and never fails the job: whatever goes wrong is one line on stderr and exit 0.
#
# Optional: with WARPTD_EPILOG_REPORT_DIR set (e.g. in slurmd's environment), it also saves the job's
# HTML report and recording there, as warptd-job-<id>-<node>.html and .json (the report extra, plotly,
# must be installed). Off by default: rendering adds one to two seconds to every job's epilog.
set -u
job=${SLURM_JOB_ID:-}
[ -n "$job" ] || exit 0
warptd=${WARPTD:-warptd}
node=$(hostname -s 2>/dev/null || hostname)
joules=$($warptd workload slurm_job "$job" --json |
    python3 -c 'import json, sys; print(round(json.load(sys.stdin)["total_joules"]))') || {
    echo "warptd epilog: no energy for job $job from warptd" >&2
    exit 0
}
scontrol update JobId="$job" AdminComment="warptd_joules_${node}=${joules}" ||
    echo "warptd epilog: scontrol could not record job $job's ${joules} J" >&2
if [ -n "${WARPTD_EPILOG_REPORT_DIR:-}" ]; then
    $warptd workload slurm_job "$job" --report "$WARPTD_EPILOG_REPORT_DIR/warptd-job-${job}-${node}.html" \
        >/dev/null || echo "warptd epilog: no report for job $job in $WARPTD_EPILOG_REPORT_DIR" >&2
fi
exit 0
