// Token embeddings: out[t] = word[id_t] + position[pos_t] + row, then, with `gamma` (BERT's embedding LayerNorm;
// null for none), the row's LayerNorm in the same pass, writing the shadow when given (Ops::embed). `pos_t` is the
// token's index in its sequence (`tok_pos`) when `pad` < 0; otherwise RoBERTa's position id (PositionIds::
// AfterPadding): `pad` for a `pad` token, else pad + 1 + the index less the `pad` ids before it in its sequence.
// `type1_row` (token type 1's; null for a model with one type) replaces `row` for a pair's tokens from its
// sequence's `type1_from` on (Batch::type1_from). One block per token row, threads over the columns. `position`
// and `row` may be null.
extern "C" __global__ void embed(const unsigned int* ids, const int* tok_pos, const int* meta, const int* offsets,
                                 const int* type1_from, const float* word, const float* position, const float* row,
                                 const float* type1_row, int dim, float* out, int ld, int pad, const float* gamma,
                                 const float* beta, float eps, unsigned short* shadow) {
    __shared__ float scratch[32];
    const int t = blockIdx.x;
    if (t >= META_TOKENS(meta)) {
        return;
    }
    const float* w = word + (size_t)ids[t] * dim;
    int pos = tok_pos[t];
    if (type1_row) {
        // The token's sequence: the last whose offset is at or before its start (an empty sequence's offset equals
        // the next one's), found by bisection over the batch's offsets.
        const int start = t - pos;
        int lo = 0, hi = META_SEQS(meta);
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (offsets[mid + 1] <= start) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if (pos >= type1_from[lo]) {
            row = type1_row;
        }
    }
    if (position && pad >= 0) {
        // The block counts the pad ids among the sequence's tokens before t (a sum of 0/1 floats: exact).
        const unsigned* seq = ids + (t - pos);
        float n = 0.0f;
        for (int i = threadIdx.x; i < pos; i += blockDim.x) {
            n += seq[i] == (unsigned)pad ? 1.0f : 0.0f;
        }
        const int pads = (int)block_sum(n, scratch);
        pos = ids[t] == (unsigned)pad ? pad : pad + 1 + pos - pads;
    }
    const float* p = position ? position + (size_t)pos * dim : 0;
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
