#!/usr/bin/env bash
# One-step set-up and run.  Usage: ./run.sh demo  |  ./run.sh test [pytest args...]
#   demo: set up .venv (with TensorBoard) and run the embedded demo campaign end to end (CPU, minutes).
#   test: set up .venv (with test tools and a headless Chromium) and run the test suite.
# The set-up is skipped when .venv is up to date: a stamp in .venv records what it was installed
# from (pyproject.toml, the torch choice, the extras); a second ./run.sh demo only asks Snakemake.
set -euo pipefail
cd "$(dirname "$0")"
what="${1:-}"; shift || true
case "$what" in demo|test) ;; *) echo "usage: ./run.sh demo | ./run.sh test [pytest args]" >&2; exit 2;; esac

venv=.venv
py="$venv/bin/python"
stamp="$venv/.ebd2n-installed"
torch_choice=cpu
if command -v nvidia-smi >/dev/null 2>&1; then torch_choice=cuda; fi
key() {  # what an install for extras "$1" depends on
  { cat pyproject.toml; echo "torch=$torch_choice extras=$1"; } | sha256sum | cut -d' ' -f1
}
extras="[live]"  # the demo's: TensorBoard, which follows its runs (the test extras hold it too)
if [ "$what" = test ]; then extras="[test]"; fi
say() { echo "run.sh: $*" >&2; }  # run.sh's own lines, on stderr like Snakemake's console
# the stamp lists one key per install it covers (a test install covers the demo's too)
if ! { [ -x "$py" ] && grep -qsx "$(key "$extras")" "$stamp"; }; then
  started=$SECONDS
  tools=""; if [ "$what" = test ]; then tools=" and the test tools (pytest, Playwright)"; fi
  say "setting up $venv (once): PyTorch, Snakemake, TensorBoard and ebd2n's other dependencies$tools;" \
      "this usually takes about 4 minutes on a fresh machine (most of it downloads)"
  if [ -x "$py" ]; then say "[1/4] $venv exists: reusing its Python"; else say "[1/4] creating $venv"; python3 -m venv "$venv"; fi
  rm -f "$stamp"
  say "[2/4] upgrading pip"
  "$py" -m pip install -q --upgrade pip
  # Install PyTorch first so the package's torch range is already satisfied: a machine without a
  # GPU gets the CPU build instead of a multi-GB CUDA build. GPU users: install your CUDA torch
  # into .venv before running this script (or use environment.yml).
  if "$py" -c "import torch" 2>/dev/null; then
    say "[3/4] PyTorch is installed in $venv already: kept"
  elif [ "$torch_choice" = cuda ]; then
    say "[3/4] installing PyTorch (a GPU is present: the default CUDA build, several GB)"
    "$py" -m pip install -q torch
  else
    say "[3/4] installing PyTorch 2.13.0, CPU build (no GPU here)"
    "$py" -m pip install -q "torch==2.13.0" 2>/dev/null \
      || "$py" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
  fi
  say "[4/4] installing ebd2n and its dependencies$tools"
  "$py" -m pip install -q -e ".$extras"
  if [ "$what" = test ]; then printf '%s\n%s\n' "$(key "[live]")" "$(key "[test]")"; else key "[live]"; fi > "$stamp"
  say "$venv is ready ($(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s)"
else
  say "$venv is up to date: nothing to install"
fi
export PATH="$PWD/$venv/bin:$PATH"

if [ "$what" = demo ]; then
  say "running the embedded demo campaign: snakemake --cores all (results in results/demo/)"
  exec snakemake --cores all
fi

if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; browser tests will be skipped" >&2
  else
    echo "warning: no chromium at /usr/bin/chromium; browser tests will be skipped (apt install chromium)" >&2
  fi
fi
# Two pytest workers, a test file each at a time (its module fixtures built once): in-process
# tests use one thread (tests/conftest.py), and the campaigns and the SLURM tests wait on their
# jobs, so a second worker fills what one leaves idle. EBD2N_TEST_WORKERS=0 runs in this process.
workers="${EBD2N_TEST_WORKERS:-2}"
parallel=()
if [ "$workers" != 0 ]; then parallel=(-n "$workers" --dist loadfile); fi
say "running the test suite: python -m pytest ${parallel[*]} $*"
exec "$py" -m pytest "${parallel[@]}" "$@"
