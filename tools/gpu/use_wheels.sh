# Sourced (not run) by the GPU wrappers in tools/gpu/, from the repository root on the device machine:
# installs the wheels carried in .whl/ (filled here by ../shared/tools/device-wheels.sh) into /tmp/site
# and puts them, then the checkout, on PYTHONPATH. A call that carries none (none in .whl/) uses /tmp/site as an
# earlier call on the same warm machine left it: the call that carries the second half of SmolLM2's GGUF has no room
# for the wheels too. With NO_WHEELS set (a rehearsal on CPU here), or no /tmp/site, the checkout alone.
# No rule needs it: it readies the lent GPU machine's Python for the wrappers, before any job runs.
if [[ -z ${NO_WHEELS:-} ]] && compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
if [[ -z ${NO_WHEELS:-} && -d /tmp/site ]]; then
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD"
fi
