/* Acts on each notice of `skewscope-probe --act-notify unix:PATH`.
   Build: cc -o act_reader act_reader.c   Run: ./act_reader /run/kiosk/act.sock */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (argc != 2 || strlen(argv[1]) >= sizeof addr.sun_path) return 2;
    strcpy(addr.sun_path, argv[1]);
    unlink(argv[1]);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { perror(argv[1]); return 1; }
    char notice[2048];
    for (ssize_t n; (n = recv(fd, notice, sizeof notice - 1, 0)) > 0;) {
        notice[n] = 0;
        printf("act now: %s\n", notice); /* the app's action goes here */
        fflush(stdout);
    }
    return 0;
}
