/* Halo Weave: the first look at every node of llama.cpp's graph, in C (see filter.py).
 *
 * ggml's scheduler asks the evaluation callback about every node of the graph
 * (ask = true: "do you want this node's data?"), over a thousand nodes per decoded
 * token, and calls it again (ask = false) only for the nodes it was told yes about,
 * once their data is computed.  Entering Python for each ask costs more than the
 * attention readout itself, so this filter answers the asks in C: softmax nodes by
 * a flag Python sets before each decode, the one node whose name Python must see by
 * forwarding, all others no.  Every ask = false call is forwarded, except a
 * softmax's while Python has asked for rows: then the last query's row of each head is
 * copied here into Python's array, [layer][head][cell] with row_stride floats per row. */

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef const char *(*name_fn)(const void *tensor);
typedef bool (*eval_fn)(void *tensor, bool ask, void *user_data);
typedef void (*get_fn)(const void *tensor, void *data, size_t offset, size_t size);

/* Mirrored by filter.py's FilterState: keep the two in the same order. */
struct filter_state {
    name_fn get_name;          /* ggml_get_name */
    eval_fn forward;           /* the Python callback */
    const char *softmax_prefix;
    size_t softmax_prefix_len;
    const char *forward_name;  /* asks about this node go to Python */
    int want_softmax;          /* set from Python before each decode */
    long long forwarded;       /* calls that entered Python (for tests and figures) */
    get_fn tensor_get;         /* ggml_backend_tensor_get */
    size_t ne_offset;          /* of ne[] in struct ggml_tensor, checked by Python */
    float *rows;               /* where rows go while non-NULL (else Python reads them) */
    long long row_stride, n_layer, n_head;
    long long layers_seen, row_width;
};

/* The last query's row of every head of a softmax [n_kv, n_tokens, n_head]; false
 * where the shape does not fit the array (Python then reads it, and says why). */
static bool copy_rows(struct filter_state *state, void *tensor, const char *name)
{
    const long long *ne = (const long long *)((const char *)tensor + state->ne_offset);
    long long n_kv = ne[0], n_tok = ne[1], n_head = ne[2], layer = 0, h;
    const char *digit = name + state->softmax_prefix_len;

    if (*digit == '\0')
        return false;
    for (; *digit; digit++) {
        if (*digit < '0' || *digit > '9')
            return false;
        layer = layer * 10 + (*digit - '0');
    }
    if (layer >= state->n_layer || n_head != state->n_head || n_kv > state->row_stride || n_tok < 1)
        return false;
    for (h = 0; h < n_head; h++)
        state->tensor_get(tensor, state->rows + (layer * n_head + h) * state->row_stride,
                          (size_t)((h * n_tok + n_tok - 1) * n_kv) * sizeof(float),
                          (size_t)n_kv * sizeof(float));
    state->row_width = n_kv;
    state->layers_seen++;
    return true;
}

bool halo_weave_filter(void *tensor, bool ask, void *user_data)
{
    struct filter_state *state = user_data;
    const char *name;

    if (!ask) {
        if (state->rows != NULL) {
            name = state->get_name(tensor);
            if (name != NULL && strncmp(name, state->softmax_prefix, state->softmax_prefix_len) == 0
                && copy_rows(state, tensor, name))
                return true;
        }
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

/* llama.cpp's abort callback (llama_set_abort_callback), asked between two nodes of a
 * decode's graph: true stops the decode.  Python arms it around the decodes it may stop
 * (a read-ahead's tokens after the cached ones) and asks from another thread. */
struct stop_state {
    volatile int armed;
    volatile int asked;
};

bool halo_weave_stop(void *data)
{
    const struct stop_state *state = data;
    return state != NULL && state->armed && state->asked;
}
