# Sourced by scripts/test and scripts/demo: make a ready environment on a fresh machine.
#   - a JRE for Spark (apt-get when `java` is missing),
#   - a virtualenv in .venv (reused; pyspark is a 450 MB source package, so pip's cache
#     is kept and an up-to-date venv is not reinstalled),
#   - the project installed in editable mode with the extras named in $SPARKDBN_EXTRAS
#     (default: test and docs, what scripts/test runs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPARKDBN_VENV:-$ROOT/.venv}"
EXTRAS="${SPARKDBN_EXTRAS:-test,docs}"

if ! command -v java >/dev/null 2>&1; then
    echo "[setup] java not found: installing a headless JRE with apt-get" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq default-jre-headless >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating virtualenv $VENV" >&2
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
fi

# Reinstall only when the package metadata or the extras changed.
STAMP="$VENV/.sparkdbn-installed"
WANT="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)-$EXTRAS"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "[setup] installing sparkdbn[$EXTRAS] into $VENV" >&2
    "$VENV/bin/python" -m pip install -q -e "$ROOT[$EXTRAS]"
    echo "$WANT" > "$STAMP"
fi

export PATH="$VENV/bin:$PATH"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
export PYSPARK_PYTHON="$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
