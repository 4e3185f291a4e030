// tests/cxx_headers.cc: the public headers compile and link from C++ (extern "C" is right).
#include <turnloop.h>
#include <cstdio>

int main()
{
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.max_handles = 0; // invalid on purpose: the C function must be reachable and say so
	tl_loop *loop = nullptr;
	int r = tl_loop_new(&loop, &cfg);
	if (r != -EINVAL || loop != nullptr) {
		std::fprintf(stderr, "cxx_headers: tl_loop_new = %d (%s), want -EINVAL\n", r, tl_strerror(r));
		return 1;
	}
	std::printf("cxx_headers: 1 passed, 0 failed\n");
	return 0;
}
