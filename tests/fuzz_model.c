/* tests/fuzz_model.c: libFuzzer entry point: the fuzzer's bytes choose the model test's API calls (tests/model_core.c). */
#include <stdio.h>
#include <stdlib.h>
#include "model_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* Every run must be a function of its input alone. */
	unsetenv("TL_SIM_SEED");
	unsetenv("TL_SIM_FAULTS");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Two bytes per choice; a few hundred calls at most keep runs short. */
	struct model_params p = {.seed = 1, .steps = 400, .data = data, .size = size};
	struct model_result r;
	if (getenv("MODEL_VERBOSE"))
		p.verbose = 1;
	if (model_run(&p, &r) != 0) {
		fprintf(stderr, "model: FAILED (fuzz input of %zu bytes) step=%u: %s\n", size, r.step,
			r.what);
		abort(); /* libFuzzer saves the input as a crash file */
	}
	return 0;
}
