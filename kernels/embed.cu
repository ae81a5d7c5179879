// Token embeddings: out[t] = word[id_t] + position[pos_t] + row, where pos_t restarts at 0 in every sequence,
// then, with `gamma` (BERT's embedding LayerNorm; null for none), the row's LayerNorm in the same pass, writing the
// shadow when given (Ops::embed). One block per token row, threads over the columns. `position` and `row` may be
// null.
extern "C" __global__ void embed(const unsigned int* ids, const int* tok_pos, const int* meta, const float* word,
                                 const float* position, const float* row, int dim, float* out, int ld,
                                 const float* gamma, const float* beta, float eps, unsigned short* shadow) {
    __shared__ float scratch[32];
    const int t = blockIdx.x;
    if (t >= META_TOKENS(meta)) {
        return;
    }
    const float* w = word + (size_t)ids[t] * dim;
    const float* p = position ? position + (size_t)tok_pos[t] * dim : 0;
    float* o = out + (size_t)t * ld;
    float s = 0.0f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float v = w[c];
        if (p) {
            v += p[c];
        }
        if (row) {
            v += row[c];
        }
        o[c] = v;
        s += v;
    }
    if (gamma) {
        layer_norm_row(o, dim, t, s, gamma, beta, eps, shadow, scratch);
    }
}
