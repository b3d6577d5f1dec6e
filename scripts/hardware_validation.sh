#!/usr/bin/env bash
# Read-only checks of the NVIDIA backend on a machine with a real GPU; results go to OUT (default ./hw-out).
# Changes no GPU setting: no MIG mode, compute mode, time-slice, clock change and no reset. The MPS
# control daemon it starts serves nothing (no client connects), uses its own pipe and log folders and
# is told to quit at the end. docs/hardware-validation.md describes each step and what was seen.
set -uo pipefail
OUT="${1:-${OUT:-./hw-out}}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
DRA=(python3 -m dra_driver.cli.main)
step() { echo; echo "=== $*"; }

step "GPU and driver"
nvidia-smi -L
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap,compute_mode,mig.mode.current,pci.bus_id --format=csv
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1

step "raw NVML getters"
python3 scripts/nvml_probe.py > "$OUT/probe.json"; echo "probe rc=$?"

step "discover against real NVML, and the simulated dgx-h100"
TIMEFORMAT="discover (real NVML): wall %R s"
for run in 1 2 3; do
    time "${DRA[@]}" discover -o json > "$OUT/real.json" 2> "$OUT/real.err"
done
head -20 "$OUT/real.err"
"${DRA[@]}" discover --profile dgx-h100 -o json > "$OUT/sim.json"
"${DRA[@]}" discover -o table

step "device readings (dra_driver_device_* metrics) against nvidia-smi, idle (scripts/metrics_check.py; run it again under a CUDA load)"
python3 scripts/metrics_check.py --rounds 2; echo "metrics check rc=$?"

step "device nodes, driver files, libraries"
ls -la /dev/nvidia* /dev/nvidia-caps 2>&1
ldconfig -p | grep -E "libcuda\.so|libnvidia-ml\.so|libnvidia-ptxjitcompiler|libnvidia-nvvm" | head
command -v nvidia-smi nvidia-cuda-mps-control nvidia-cuda-mps-server nvidia-debugdump nvidia-persistenced
ls /lib/firmware/nvidia/*/ 2>&1 | head
python3 - <<'PY'
from pathlib import Path
import pynvml
from dra_driver_nvidia import driver_files
pynvml.nvmlInit(); version = pynvml.nvmlSystemGetDriverVersion(); pynvml.nvmlShutdown()
found = driver_files.discover(Path("/"), version)
print("driver", version, "-", len(found.libraries), "libraries")
for lib in found.libraries:
    print("  ", lib.path, lib.sonames)
print("binaries", found.binaries)
print("firmware", found.firmware)
print("sockets", found.sockets)
PY

step "prepare on the real GPU: CDI spec paths exist on the host"
PYTHONUNBUFFERED=1 python3 scripts/host_prepare_check.py --out "$OUT/specs"

step "prepare latency on the real GPU (static, concurrency 1, one device per claim)"
PYTHONUNBUFFERED=1 python3 bench/bench_prepare.py --profile host --claims 300 --concurrency 1 16 --devices 1 --repeat 2
PYTHONUNBUFFERED=1 python3 bench/bench_prepare.py --profile dgx-h100 --claims 300 --concurrency 1 16 --devices 1 --repeat 2

step "MPS control daemon: lifecycle and the limit commands (no client, GPU settings untouched)"
MPS=$(mktemp -d)
mkdir -p "$MPS/pipe" "$MPS/log"
export CUDA_MPS_PIPE_DIRECTORY="$MPS/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS/log"
nvidia-cuda-mps-control -d; echo "start rc=$?"
sleep 1
ls -la "$MPS/pipe" "$MPS/log"
pgrep -a nvidia-cuda-mps || true
for cmd in "get_default_active_thread_percentage" "set_default_active_thread_percentage 50" \
        "get_default_active_thread_percentage" "get_default_device_pinned_mem_limit 0" \
        "set_default_device_pinned_mem_limit 0 20G" "get_default_device_pinned_mem_limit 0" \
        "get_server_list" "bogus_command"; do
    printf '> %s\n' "$cmd"
    echo "$cmd" | timeout 10 nvidia-cuda-mps-control; echo "  rc=$?"
done
echo quit | timeout 10 nvidia-cuda-mps-control; echo "quit rc=$?"
sleep 1
pgrep -a nvidia-cuda-mps || echo "no MPS process left"
cat "$MPS/log/control.log" 2>&1 | tail -20
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
rm -rf "$MPS"

step "MPS through the NVIDIA backend (compute mode left as it is): limits, CUDA clients under and over the memory limit"
timeout 300 python3 scripts/mps_check.py --limit 8Gi --repeat 3

step "time-slice and compute policy, read-only"
nvidia-smi compute-policy --help 2>&1 | head -30
nvidia-smi -q -d COMPUTE 2>&1 | tail -5
