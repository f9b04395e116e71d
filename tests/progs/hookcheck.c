//go:build osf_make

/* hookcheck: calls every function libosf.so hooks with arguments that
 * fail (or succeed trivially) and prints "name ret errno" per call, so a
 * test can diff the output bare and under LD_PRELOAD: osf must not change
 * a single return value or errno for fds it does not own.
 *
 * hookcheck --core first makes a TCP connection on loopback (under osf,
 * that loads the Go core, so the checks run with the core loaded); the
 * output on stdout is the same either way. At the end it reports on stderr
 * which osf libraries its /proc/self/maps shows:
 * "maps: libosf=1 libosfcore=1". */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "progs.h"

extern ssize_t __read_chk(int, void *, size_t, size_t);
extern ssize_t __recv_chk(int, void *, size_t, size_t, int);
extern ssize_t __recvfrom_chk(int, void *, size_t, size_t, int,
			      struct sockaddr *, socklen_t *);
extern int __poll_chk(struct pollfd *, nfds_t, int, size_t);
extern int __ppoll_chk(struct pollfd *, nfds_t, const struct timespec *,
		       const sigset_t *, size_t);

#define CHECK(name, call)                                                      \
	do {                                                                   \
		long r_;                                                       \
		errno = 0;                                                     \
		r_ = (long)(call);                                             \
		printf("%-16s %ld %s\n", name, r_, r_ < 0 ? strerrorname_np(errno) : "-"); \
	} while (0)

int main(int argc, char **args)
{
	char buf[16];
	struct iovec iov = {buf, sizeof buf};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	struct mmsghdr mm = {.msg_hdr = mh};
	struct sockaddr_in sin = {.sin_family = AF_INET};
	socklen_t sl = sizeof sin;
	struct pollfd pfd = {.fd = 777, .events = POLLIN};
	struct timespec ts = {0, 0};
	struct timeval tv = {0, 0};
	struct epoll_event ev = {.events = EPOLLIN};
	fd_set rs;
	int bad = 777, sv[2], v = 1, ep;
	char *argv[] = {"/nonexistent/x", NULL}, *envp[] = {NULL};
	pid_t pid;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc > 1 && strcmp(args[1], "--core") == 0 && tcp_loopback() < 0) {
		perror("hookcheck: tcp connection on loopback");
		return 1;
	}
	FD_ZERO(&rs);
	CHECK("socket", socket(12345, SOCK_STREAM, 0));
	CHECK("socketpair", socketpair(AF_INET, SOCK_STREAM, 0, sv));
	CHECK("bind", bind(bad, (struct sockaddr *)&sin, sizeof sin));
	CHECK("listen", listen(bad, 1));
	CHECK("accept", accept(bad, NULL, NULL));
	CHECK("accept4", accept4(bad, NULL, NULL, SOCK_NONBLOCK));
	CHECK("connect", connect(bad, (struct sockaddr *)&sin, sizeof sin));
	CHECK("read", read(bad, buf, 1));
	CHECK("readv", readv(bad, &iov, 1));
	CHECK("write", write(bad, buf, 1));
	CHECK("writev", writev(bad, &iov, 1));
	CHECK("send", send(bad, buf, 1, 0));
	CHECK("sendto", sendto(bad, buf, 1, 0, NULL, 0));
	CHECK("sendmsg", sendmsg(bad, &mh, 0));
	CHECK("sendmmsg", sendmmsg(bad, &mm, 1, 0));
	CHECK("recv", recv(bad, buf, 1, 0));
	CHECK("recvfrom", recvfrom(bad, buf, 1, 0, NULL, NULL));
	CHECK("recvmsg", recvmsg(bad, &mh, 0));
	CHECK("recvmmsg", recvmmsg(bad, &mm, 1, 0, NULL));
	CHECK("sendfile", sendfile(bad, bad, NULL, 1));
	CHECK("sendfile64", sendfile64(bad, bad, NULL, 1));
	CHECK("shutdown", shutdown(bad, SHUT_RDWR));
	CHECK("dup", dup(bad));
	CHECK("dup2", dup2(bad, 778));
	CHECK("dup3", dup3(bad, 778, O_CLOEXEC));
	CHECK("dup3-same", dup3(1, 1, 0));
	CHECK("fcntl", fcntl(bad, F_GETFL));
	CHECK("fcntl-dupfd", fcntl(bad, F_DUPFD, 10));
	CHECK("ioctl", ioctl(bad, FIONREAD, &v));
	CHECK("getsockopt", getsockopt(bad, SOL_SOCKET, SO_TYPE, &v, &sl));
	CHECK("setsockopt", setsockopt(bad, SOL_SOCKET, SO_REUSEADDR, &v, sizeof v));
	CHECK("getsockname", getsockname(bad, (struct sockaddr *)&sin, &sl));
	CHECK("getpeername", getpeername(bad, (struct sockaddr *)&sin, &sl));
	CHECK("getsockopt-file", getsockopt(0, SOL_SOCKET, SO_TYPE, &v, &sl));
	CHECK("poll", poll(&pfd, 1, 0));
	printf("poll-revents     %d\n", pfd.revents);
	CHECK("ppoll", ppoll(&pfd, 1, &ts, NULL));
	CHECK("select", select(-1, &rs, NULL, NULL, &tv));
	CHECK("pselect", pselect(-1, &rs, NULL, NULL, &ts, NULL));
	CHECK("epoll_create", epoll_create(0));
	CHECK("epoll_create1", epoll_create1(12345));
	CHECK("epoll_ctl", epoll_ctl(bad, EPOLL_CTL_ADD, 0, &ev));
	CHECK("epoll_wait", epoll_wait(bad, &ev, 1, 0));
	CHECK("epoll_pwait", epoll_pwait(bad, &ev, 1, 0, NULL));
	CHECK("epoll_pwait2", epoll_pwait2(bad, &ev, 1, &ts, NULL));
	ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK("epoll_ctl-self", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
	CHECK("epoll_wait-0", epoll_wait(ep, &ev, 1, 0));
	CHECK("epoll_wait-max", epoll_wait(ep, &ev, 0, 0));
	close(ep);
	CHECK("close", close(bad));
	CHECK("close_range", close_range(5, 2, 0));
	CHECK("execve", execve("/nonexistent/x", argv, envp));
	CHECK("execv", execv("/nonexistent/x", argv));
	CHECK("execvp", execvp("nonexistent-osf-x", argv));
	CHECK("execvpe", execvpe("nonexistent-osf-x", argv, envp));
	CHECK("execl", execl("/nonexistent/x", "x", (char *)NULL));
	CHECK("execlp", execlp("nonexistent-osf-x", "x", (char *)NULL));
	CHECK("execle", execle("/nonexistent/x", "x", (char *)NULL, envp));
	CHECK("fexecve", fexecve(bad, argv, envp));
	CHECK("execveat", execveat(bad, "x", argv, envp, 0));
	CHECK("posix_spawn", posix_spawn(&pid, "/nonexistent/x", NULL, NULL, argv, envp));
	CHECK("posix_spawnp", posix_spawnp(&pid, "nonexistent-osf-x", NULL, NULL, argv, envp));
	CHECK("sigaction", sigaction(0, NULL, NULL));
	CHECK("signal", (long)signal(SIGKILL, SIG_IGN));
	CHECK("__read_chk", __read_chk(bad, buf, 1, sizeof buf));
	CHECK("__recv_chk", __recv_chk(bad, buf, 1, sizeof buf, 0));
	CHECK("__recvfrom_chk", __recvfrom_chk(bad, buf, 1, sizeof buf, 0, NULL, NULL));
	CHECK("__poll_chk", __poll_chk(&pfd, 1, 0, sizeof pfd));
	CHECK("__ppoll_chk", __ppoll_chk(&pfd, 1, &ts, NULL, sizeof pfd));
	pid = fork();
	if (pid == 0)
		_exit(7);
	waitpid(pid, &v, 0);
	printf("fork-child       %d\n", WEXITSTATUS(v));
	pid = vfork();
	if (pid == 0)
		_exit(9);
	waitpid(pid, &v, 0);
	printf("vfork-child      %d\n", WEXITSTATUS(v));
	maps_report();
	return 0;
}
