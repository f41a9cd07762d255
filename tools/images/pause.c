/*
 * pause: the process of a pod's sandbox container (containerd's sandbox_image), built here because the test
 * cluster has no registry to pull registry.k8s.io/pause from.
 *
 * It holds the pod's namespaces open and does nothing else: it sleeps until SIGINT or SIGTERM (then exits 0) and
 * reaps any child that gets re-parented to it, so zombies never pile up when it is PID 1 of a shared PID namespace.
 * `pause -v` prints a version line. Built with `gcc -O2 -static`, so it runs in an image holding only itself.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signo)
{
	(void)signo;
	_exit(0);
}

static void reap(int signo)
{
	(void)signo;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

static void on(int signo, void (*handler)(int), int flags)
{
	struct sigaction action;

	memset(&action, 0, sizeof(action));
	action.sa_handler = handler;
	action.sa_flags = flags;
	sigemptyset(&action.sa_mask);
	if (sigaction(signo, &action, NULL) != 0) {
		perror("pause: sigaction");
		_exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("pause (pko test bed) 3.10.1");
		return 0;
	}
	if (getpid() != 1)
		fputs("pause: warning: not running as PID 1\n", stderr);

	on(SIGINT, stop, 0);
	on(SIGTERM, stop, 0);
	on(SIGCHLD, reap, SA_NOCLDSTOP | SA_RESTART);

	for (;;)
		pause();
}
