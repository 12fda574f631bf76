#!/usr/bin/env bash
# Build gnn4colliders on a Perlmutter login node with CUDA and Cray MPICH.
#   bash scripts/slurm/build-perlmutter.sh        -> target/release/gnn4colliders
#
# The `mpi` crate finds Cray MPICH through $CRAY_MPICH_DIR (set by `module load cray-mpich`);
# its bindgen step needs libclang (the `llvm` module, or LIBCLANG_PATH). burn-cuda needs no
# CUDA toolkit to build; the driver is loaded at run time on the GPU nodes.
set -euo pipefail
module load PrgEnv-gnu cray-mpich cudatoolkit 2>/dev/null || true
module load llvm 2>/dev/null || true          # libclang for bindgen
: "${CRAY_MPICH_DIR:?load cray-mpich first (module load cray-mpich)}"
echo "building against Cray MPICH in $CRAY_MPICH_DIR"
cargo build --release --features cuda,mpi
