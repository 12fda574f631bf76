# Sourced by the network benchmarks (net_matrix.sh, net_dataset.sh): `serve_xrootd DIR RTT_MS`
# serves DIR over root:// and http:// from a real XRootD (Debian's xrootd-server) on localhost,
# and through the `latency_proxy` benchmark binary adding RTT_MS of round-trip latency (built
# here). Sets `work` (a scratch folder, removed on exit with the server and the proxy), `xrd`
# and `http` (the server's ports), `lxrd` and `lhttp` (the proxy's). Needs `py` (a Python),
# `here` (benchmarks/) and CARGO_TARGET_DIR.
# As root, xrootd runs as the `xrootd` user: DIR must be readable by it.
serve_xrootd() {
  local dir=$1 rtt=$2 as=()
  (cd "$here/.." && cargo build --release -q -p gnn4c-benchmarks --bin latency_proxy)
  work=$(mktemp -d)
  chmod 755 "$work"
  port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
  xrd=$(port) http=$(port) lxrd=$(port) lhttp=$(port)
  cat > "$work/xrd.cfg" <<CFG
xrd.port $xrd
xrd.protocol XrdHttp:$http libXrdHttp.so
all.export /
oss.localroot $dir
all.adminpath $work/admin
all.pidpath $work/run
CFG
  if [ "$(id -u)" = 0 ]; then chown -R xrootd "$work"; as=(-R xrootd); fi
  xrootd "${as[@]}" -c "$work/xrd.cfg" -n bench -l "$work/xrd.log" -b
  "$CARGO_TARGET_DIR/release/latency_proxy" "$rtt" "$lxrd:$xrd" "$lhttp:$http" > "$work/proxy.log" &
  proxy=$!
  trap 'kill $proxy 2>/dev/null; pkill -f "$work/xrd.cfg" 2>/dev/null; rm -rf "$work"' EXIT
  sleep 2
}
