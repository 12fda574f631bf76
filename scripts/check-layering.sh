#!/usr/bin/env bash
# Layering invariants of docs/architecture.md, checked on the normal (non-dev) dependency graph.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
deps() { cargo tree -q -p "$1" -e normal --prefix none --no-dedupe 2>/dev/null | sed 's/ .*//' | sort -u; }
forbid() { # crate, description, regex of forbidden dependency names
  local crate=$1 what=$2 re=$3 bad
  bad=$(deps "$crate" | grep -E "$re" | grep -vx "$crate" || true)
  if [ -n "$bad" ]; then
    echo "layering: $crate must not depend on $what, but its tree has: $(echo $bad)"; fail=1
  fi
}
formats='^(oxyroot|parquet|arrow.*|ndarray-npy|zip)$'
burn='^burn(-.*)?$'
backends='^burn-(flex|ndarray|cuda|wgpu|tch|candle|cpu|rocm)$|^cubecl-(cuda|wgpu|hip|cpu)$'
cli_only='^(clap|clap_.*|anyhow|figment)$'
# The families' crates: every package under crates/models.
family_crates=$(for f in crates/models/*/Cargo.toml; do sed -n '0,/^name = /s/^name = "\(.*\)"/\1/p' "$f"; done | tr '\n' ' ')
families=$(echo "$family_crates" | sed 's/ *$//; s/ /|/g; s/^/^(/; s/$/)$/')
forbid gnn4c-events "Burn, Arrow, Parquet or oxyroot" "$formats|$burn|^arrow|^parquet"
forbid gnn4c-features "Burn, Arrow, Parquet or oxyroot" "$formats|$burn|^arrow|^parquet"
for c in gnn4c-graphs gnn4c-root-gnn gnn4c-tasks gnn4c-training gnn4c-inference gnn4c-distributed; do
  forbid "$c" "file formats (only gnn4c-data knows them)" "$formats|^gnn4c-data$"
done
# No graph type below the families: the trainer, inference, tasks and the family traits are
# generic over gnn4c-family's traits and name no graph or model type.
for c in gnn4c-training gnn4c-inference gnn4c-distributed gnn4c-tasks gnn4c-family; do
  forbid "$c" "a graph or model crate (generic over traits)" "^gnn4c-(graphs|run)\$|$families"
done
# The run layer (gnn4c-run) is the binary's library: it knows no argument parser, and only the
# binary and the benchmarks build on it.
forbid gnn4c-run "clap (the binary parses arguments)" '^(clap|clap_.*)$'
for c in gnn4c-events gnn4c-data gnn4c-features gnn4c-graphs gnn4c-root-gnn gnn4c-root-transformer gnn4c-tasks gnn4c-training gnn4c-distributed gnn4c-inference gnn4c-family; do
  forbid "$c" "the run layer" '^gnn4c-run$'
done
for c in gnn4c-events gnn4c-data gnn4c-features gnn4c-graphs gnn4c-tasks gnn4c-training gnn4c-distributed gnn4c-inference gnn4c-family $family_crates; do
  forbid "$c" "clap, anyhow or figment (cli and benchmarks only)" "$cli_only"
done
# A family's crate brings its CPU kernels for burn-flex (gnn4c_family::Kernels) and chooses no
# other backend; below the families nobody names a backend.
for c in gnn4c-events gnn4c-data gnn4c-features gnn4c-graphs gnn4c-tasks gnn4c-training gnn4c-distributed gnn4c-inference gnn4c-family; do
  forbid "$c" "a concrete Burn backend (run, cli and benchmarks choose it)" "$backends"
done
for c in $family_crates; do
  forbid "$c" "a GPU backend (run, cli and benchmarks choose it)" '^burn-(cuda|wgpu|tch|candle|rocm)$|^cubecl-(cuda|wgpu|hip)$'
  forbid "$c" "the trainer, inference, the run layer or file formats (families implement gnn4c-family's traits)" "^gnn4c-(training|inference|distributed|run|data)\$|$formats"
done
# What a model family implements (gnn4c-family): Burn's tensor API alone. Model crates implement
# it without depending on the trainer.
forbid gnn4c-family "a workspace crate, file formats, CLI crates or a Burn backend" "^gnn4c-|$formats|$cli_only|$backends"
forbid gnn4c-root-transformer "graphs (it reads padded tokens)" '^gnn4c-graphs$'
# A family lives in its crate: above the families, only the run layer's registration names one
# (`families!` in crates/run/src/family.rs, one line per family); the trainer, inference, the
# scorer and the binary are generic over gnn4c-family's traits.
family_paths=$(echo "$family_crates" | tr ' -' '\n_' | grep -v '^$' | sed 's/$/::/' | paste -sd'|')
if grep -rnE "($family_paths)" crates/*/src --include='*.rs' | grep -v '^crates/models/' \
    | grep -vE '^crates/run/src/family\.rs:[0-9]+:    [A-Z][A-Za-z]*\(gnn4c_[a-z_]+::[A-Za-z]+Family\) = "[a-z_]+",$'; then
  echo "layering: the lines above name a model family outside its crate and the registration"; fail=1
fi
# The project's CPU kernels: plain slices, no tensor library, no file formats, no CLI crates.
forbid gnn4c-kernels "Burn, file formats or CLI crates (plain f32 slices)" "$burn|$formats|$cli_only|^gnn4c-"
# The ONNX writer: Burn's layers and plain values in, an ONNX file's bytes out; no backend, no
# other format, no workspace crate (the families depend on it, not it on them).
forbid gnn4c-onnx "a workspace crate, file formats, CLI crates or a Burn backend" "^gnn4c-|$formats|$cli_only|$backends"
# The project's ROOT reader: no tensor library, no other file-format or reader crate, no CLI
# crates, no workspace crate; and reading ROOT is its alone (oxyroot only writes friend trees).
forbid gnn4c-rootio "Burn, other file formats or CLI crates" "$burn|$formats|$cli_only|^gnn4c-"
if grep -rln 'oxyroot::' crates --include='*.rs' | grep -vx 'crates/data/src/root/write.rs' | grep -v '/tests/'; then
  echo "layering: the files above use oxyroot outside the friend-tree writer"; fail=1
fi
# No model parameter name outside its family: the run layer, the binary and the other crates
# reach a head or a backbone through gnn4c_family::ModelFamily (tests may name weights).
params='"(classify|node_encoder|edge_encoder|global_encoder|edge_update|node_update|decoder|token_embed|global_embed|pair_embed|layers)[."]'
if grep -rnE "$params" crates/*/src benchmarks/src --include='*.rs' | grep -v '^crates/models/'; then
  echo "layering: the lines above name a model's parameters outside its family's crate"; fail=1
fi
# The contract's reference path is for tests and benchmarks: the binary's tree, every product
# crate, does not hold it.
forbid gnn4c-cli "the contract's reference path (tests and benchmarks only)" '^gnn4c-reference$'
# Third-party code only from the registry: no [patch] but the xz2 shim, no vendored folder.
patched=$(awk '/^\[patch\./{p=1;next} /^\[/{p=0} p && /=/ {print $1}' Cargo.toml | tr '\n' ' ')
if [ "$patched" != "xz2 " ]; then
  echo "layering: [patch] may name the xz2 shim only, but names: $patched"; fail=1
fi
if [ -e vendor ] || git ls-files | grep -qiE '\.(ttf|otf|woff2?|whl)$'; then
  echo "layering: vendored code, a copied font or a downloaded package is in the repository"; fail=1
fi
# `unsafe` lives in gnn4c-kernels alone among the crates (the workspace denies it; benchmarks/
# has one measuring tool, benchmark_preprocessing's counting allocator).
if grep -rln 'allow(unsafe_code)' crates --include='*.rs' | grep -v '^crates/kernels/'; then
  echo "layering: the files above allow unsafe code outside crates/kernels"; fail=1
fi
# No crate re-exports another workspace crate's items.
if grep -rnE 'pub use (::)?gnn4c_' crates benchmarks --include='*.rs'; then
  echo "layering: the lines above re-export another workspace crate"; fail=1
fi
# No import circles between the files of a crate: each file's job leans on others below it.
if ! python3 scripts/import-circles.py; then
  echo "layering: the crates above have files that import each other in a circle"; fail=1
fi
# No source file over 800 lines outside the kernels: a file that grows past it is split by job.
while read -r lines file; do
  if [ "$lines" -gt 800 ]; then
    echo "layering: $file has $lines lines (over 800): split it by job"; fail=1
  fi
done < <(find crates benchmarks -path '*/src/*' -name '*.rs' -not -path 'crates/kernels/*' \
  -exec wc -l {} + | grep -v ' total$')
# No function over 100 lines outside the kernels.
if ! python3 scripts/long-functions.py; then
  echo "layering: the functions above are over 100 lines"; fail=1
fi
[ $fail = 0 ] && echo "layering: ok"
exit $fail
