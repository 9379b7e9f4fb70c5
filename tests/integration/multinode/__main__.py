"""`python -m tests.integration.multinode`: run prog.main (the targets live in prog, which is
then imported under its own name, not as __main__)."""

from tests.integration.multinode.prog import main

main()
