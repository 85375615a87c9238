/* Acts on each notice of `skewscope-probe --act-notify unix:PATH`, and
   answers it with the moment it acted, so the audit judges this app's own
   actions. Build: cc -o act_reader act_reader.c   Run: ./act_reader /run/kiosk/act.sock */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (argc != 2 || strlen(argv[1]) >= sizeof addr.sun_path) return 2;
    strcpy(addr.sun_path, argv[1]);
    unlink(argv[1]);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { perror(argv[1]); return 1; }
    char notice[2048], answer[128];
    struct sockaddr_un probe;
    socklen_t probe_len = sizeof probe;
    for (ssize_t n; (n = recvfrom(fd, notice, sizeof notice - 1, 0, (struct sockaddr *)&probe, &probe_len)) > 0;
         probe_len = sizeof probe) {
        notice[n] = 0;
        printf("act now: %s\n", notice); /* the app's action goes here */
        struct timespec acted;
        clock_gettime(CLOCK_MONOTONIC, &acted); /* the moment it acted */
        fflush(stdout);
        const char *number = strstr(notice, "\"notice\":");
        if (number == NULL) continue;
        int len = snprintf(answer, sizeof answer, "{\"notice\":%llu,\"acted_mono_ns\":%llu}",
                           strtoull(number + 9, NULL, 10),
                           (unsigned long long)acted.tv_sec * 1000000000ull + (unsigned long long)acted.tv_nsec);
        sendto(fd, answer, (size_t)len, 0, (struct sockaddr *)&probe, probe_len);
    }
    return 0;
}
