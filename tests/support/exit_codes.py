"""ddprun's exit codes by name, as common/exit_codes.hpp defines them (README "Exit codes"); test_exit_codes.py
checks that the two agree, so a test compares a result with HUNG, not with 78. A job that ran exits with its root
cause's code instead: the worker's own code, or 128+N for signal N. No side effect on import."""

USAGE = 64            # bad option, value or combination (nothing started)
NO_INPUT = 66         # --rdzv-token-file cannot be read
UNAVAILABLE = 69      # a port asked for is in use; a node of a multi-node job could not start
SOFTWARE = 70         # internal error (a bug in ddprun)
OS_ERROR = 71         # the system refused, or a resource ran out
CANT_CREATE = 73      # log directory or events file cannot be written
RDZV_UNAVAILABLE = UNAVAILABLE  # the rendezvous port to host cannot be bound
RDZV_LOST = 74        # this node lost the rendezvous server
RDZV_TIMEOUT = 75     # not every node joined in time, or the server was never reached
RDZV_PROTOCOL = 76    # the server broke the protocol
RDZV_REFUSED = 77     # refused: wrong token or run id, duplicate or out-of-range node rank
PREEMPTED = 79        # a notice or SIGTERM reached ddprun and every worker then exited 0
HUNG = 78             # the root cause stopped beating for --hang-timeout (not 137, an OOM kill)
NOT_EXECUTABLE = 126  # PROGRAM is a directory or not executable
NOT_FOUND = 127       # PROGRAM, the script or Python not found
