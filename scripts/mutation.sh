#!/usr/bin/env bash
# Mutation testing with mutmut 3 (configured in [tool.mutmut] in pyproject.toml).
#
# Mutates src/murmur/algorithms/, the drivers of the parameter server and of ARock
# (sim/ and distributed/ server.py, sim/layer_network.py and distributed/layer_ranks.py), the transports, the mailbox and the push
# channel, and runs, for each mutant, only the tests of tests/{algorithms,sim,distributed,
# training,metrics,topology} that the stats phase saw call the mutated function. This
# takes long (an hour or more on two cores) and is not part of CI.
#
# mutmut copies the code into mutants/ and runs pytest from there; PYTHONPATH points at
# the mutated copy so that ranks started as subprocesses (python -c ..., python -m murmur)
# import it too, rather than an installed or editable murmur. Those child processes are
# not traced, so a function only they run has "no tests" and counts as not caught.
#
# Usage: scripts/mutation.sh [mutant names or globs...]    (then: mutmut results, mutmut show NAME)
# MUTMUT_CHILDREN sets --max-children (default 1). Delete mutants/ to start afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/mutants/src"
exec nice -n 19 mutmut run --max-children "${MUTMUT_CHILDREN:-1}" "$@"
