# Sourced (not run) by the GPU wrappers in tools/gpu/, from the repository root on the device machine:
# installs the wheels carried in .whl/ (filled here by ../shared/tools/device-wheels.sh) into /tmp/site
# and puts them, then the checkout, on PYTHONPATH. Without wheels (or with NO_WHEELS set, e.g. to
# rehearse a wrapper on CPU here), the checkout alone.
# No rule needs it: it readies the lent GPU machine's Python for train_canary_sweep.sh, before any job runs.
if [[ -z ${NO_WHEELS:-} ]] && compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD"
fi
