#!/usr/bin/env bash
# Installs what building and testing htb needs, skipping whatever is already there:
# Debian packages (clang/llvm/libelf/zlib/m4/pkg-config/make build the XDP program and libxdp;
# iproute2/iputils-ping/ethtool/iperf3 run the network-namespace lab (tcpdump times packets in bench-scale), nftables gives a lab test
# netfilter rules, systemd's systemd-analyze checks the service unit; chromium and
# chromium-driver run the browser tests of the web console, prometheus a real Prometheus server
# scraping htbd, bird2 and keepalived the routing daemons of the lab of several boxes, nfdump
# the IPFIX collector (nfcapd) the flow export is tested against) and a
# Rust toolchain with
# a nightly and cargo-fuzz for the fuzz targets, cargo-deny for the dependency checks, and
# mdbook for the book under docs/.
set -euo pipefail

PACKAGES=(clang llvm libelf-dev zlib1g-dev m4 pkg-config make libbpf-dev
          iproute2 iputils-ping ethtool iperf3 nftables systemd curl ca-certificates tcpdump
          chromium chromium-driver prometheus bird2 keepalived nfdump)
# Daemons whose packages enable a system-wide service: the lab runs its own instances in network
# namespaces, so the ones installed here are stopped and disabled again.
LAB_DAEMONS=(bird2:bird keepalived:keepalived nfdump:nfdump)

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    for entry in "${LAB_DAEMONS[@]}"; do
        if [[ " ${missing[*]} " == *" ${entry%%:*} "* ]] && command -v systemctl >/dev/null &&
            [ -d /run/systemd/system ]; then
            $SUDO systemctl disable --now "${entry##*:}" >/dev/null 2>&1 || true
        fi
    done
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "setup: installing the Rust toolchain (rustup, stable)"
        curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component clippy,rustfmt
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
fi
for component in clippy rustfmt; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        rustup component add "$component"
    fi
done
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "setup: installing the nightly toolchain (cargo fuzz needs it)"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "setup: installing cargo-fuzz"
    cargo install cargo-fuzz --locked --quiet
fi
if ! command -v cargo-deny >/dev/null 2>&1; then
    # A debug build without line tables: ~1.5 minutes on 2 cores against ~6.5 for a release
    # build, and its offline checks take a second either way.
    echo "setup: installing cargo-deny (checks the dependencies' licences, bans and sources)"
    CARGO_PROFILE_DEV_DEBUG=false cargo install cargo-deny --version 0.20.2 --locked --quiet --debug
fi
if ! command -v mdbook >/dev/null 2>&1; then
    # The book under docs/ (scripts/test.sh builds it). Without the default features' `serve`
    # and `watch` (a web server and a file watcher `mdbook build` does not use), and, as
    # cargo-deny, a debug build without line tables: ~2 minutes on 2 cores against ~6 for a
    # release build, and the book builds in 2 s against 0.4.
    echo "setup: installing mdbook (builds the book under docs/)"
    CARGO_PROFILE_DEV_DEBUG=false cargo install mdbook --version 0.4.52 --locked --quiet --debug \
        --no-default-features --features search
fi
