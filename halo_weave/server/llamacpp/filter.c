/* Halo Weave: the first look at every node of llama.cpp's graph, in C (see filter.py).
 *
 * ggml's scheduler asks the evaluation callback about every node of the graph
 * (ask = true: "do you want this node's data?"), over a thousand nodes per decoded
 * token, and calls it again (ask = false) only for the nodes it was told yes about,
 * once their data is computed.  Entering Python for each ask costs more than the
 * attention readout itself, so this filter answers the asks in C: softmax nodes by
 * a flag Python sets before each decode, the one node whose name Python must see by
 * forwarding, all others no.  Every ask = false call is forwarded. */

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef const char *(*name_fn)(const void *tensor);
typedef bool (*eval_fn)(void *tensor, bool ask, void *user_data);

/* Mirrored by filter.py's FilterState: keep the two in the same order. */
struct filter_state {
    name_fn get_name;          /* ggml_get_name */
    eval_fn forward;           /* the Python callback */
    const char *softmax_prefix;
    size_t softmax_prefix_len;
    const char *forward_name;  /* asks about this node go to Python */
    int want_softmax;          /* set from Python before each decode */
    long long forwarded;       /* calls that entered Python (for tests and figures) */
};

bool halo_weave_filter(void *tensor, bool ask, void *user_data)
{
    struct filter_state *state = user_data;
    const char *name;

    if (!ask) {
        state->forwarded++;
        return state->forward(tensor, false, NULL);
    }
    name = state->get_name(tensor);
    if (name == NULL)
        return false;
    if (strncmp(name, state->softmax_prefix, state->softmax_prefix_len) == 0)
        return state->want_softmax != 0;
    if (strcmp(name, state->forward_name) == 0) {
        state->forwarded++;
        return state->forward(tensor, true, NULL);
    }
    return false;
}
