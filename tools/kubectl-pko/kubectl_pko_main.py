"""Entry point of the standalone `kubectl-pko` executable in the krew archive: the same command line as the
`kubectl-pko` console script pip installs, with no Python needed beside it."""

from pko.cli.ctl.app import console

if __name__ == "__main__":
    console()
