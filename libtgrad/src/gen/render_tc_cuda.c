/* The tc route in CUDA C++: tensor cores through bf16 mma.sync.m16n8k16 (sm_80+).
 *
 * The route's geometry is kernels/routes.h's, as in MSL: 32 x 32 outputs per block of 128
 * threads, 4 warps as 2 x 2, each warp owning a 16 x 16 block; k is staged 16 deep. A warp's
 * block is two m16n8 tiles side by side, so each k16 step is two mma.sync sharing one A fragment.
 * Operands are staged in shared memory as bf16 bits (ushort), DAZ'd (a subnormal becomes a zero
 * of its sign, the canonical numerics' input rule) and +0 outside the matrix, so the padding adds
 * exact zero products. The fp32 accumulators stay in registers and each output goes through the
 * routes' one store step (tg_emit_store: round to bf16, then the fused epilogue).
 *
 * The mma is inline PTX in one device function, tg_mma_m16n8k16_bf16, so the text needs no header
 * (no <mma.h>) and a CPU emulation can replace that one function by name. Its fragment layout is
 * the PTX ISA's for mma.m16n8k16 with .bf16 (lane = 4 * g + q):
 *   a0: A[g][2q, 2q+1]    a1: A[g+8][2q, 2q+1]    a2: A[g][2q+8, 2q+9]    a3: A[g+8][2q+8, 2q+9]
 *   b0: B[2q, 2q+1][g]    b1: B[2q+8, 2q+9][g]
 *   d0: D[g][2q]  d1: D[g][2q+1]  d2: D[g+8][2q]  d3: D[g+8][2q+1]
 * each 32-bit a/b register holding two bf16, the lower column (a) or row (b) index in its low half.
 * Numerics: the hardware's summation order inside the mma is not documented; the route is held to
 * the bound of docs/kernels.md ("Numerics of tc"). */
#include <inttypes.h>

#include "emit.h"
#include "routes.h"

enum { MMA_M = 16, MMA_N = 8, MMA_K = 16, WARP = 32 };

/* bf16 bits staged as they are, except a subnormal, which becomes a zero of its sign (DAZ). */
static const tg_stage_value stage_bf16 = { "ushort", "(ushort)0u", "tg_daz_bf16" };

uint32_t tg_tc_cuda_shared_bytes(const tg_route *r) {
    return (uint32_t)(2 * r->tile_k * (r->tile_m + r->tile_n)); /* a_tile and b_tile, 2 bytes each */
}

static void emit_tc_helpers(const emitter *e) {
    const char *fp = e->l->function_prefix;
    E("// bf16 bits with a subnormal made a zero of its sign (DAZ), as the tiles hold them.\n");
    E("%s ushort tg_daz_bf16(ushort h) {\n", fp);
    E("    return (h & 0x7f80u) == 0u ? (ushort)(h & 0x8000u) : h;\n");
    E("}\n\n");
    E("// Two bf16 as one mma register: `lo` (the lower column of A, row of B) in the low half.\n");
    E("%s uint tg_pack_bf16(ushort lo, ushort hi) {\n", fp);
    E("    return (uint)lo | ((uint)hi << 16);\n");
    E("}\n\n");
    E("// d[0..3] += A * B for one m16n8k16 tile: bf16 A (a0..a3) and B (b0, b1) in the PTX ISA's\n");
    E("// fragment layout, fp32 accumulation in the tensor core's order.\n");
    E("%s void tg_mma_m16n8k16_bf16(float *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {\n", fp);
    E("    asm(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 \"\n");
    E("        \"{%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, {%%0, %%1, %%2, %%3};\"\n");
    E("        : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n");
    E("        : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"r\"(b0), \"r\"(b1));\n");
    E("}\n\n");
}

/* One k16 step of a warp: its A fragment (rows sm + g, sm + g + 8), then per n8 tile j its B
 * fragment (column sn + 8j + g) and the mma. */
static void emit_k_step(const emitter *e, int32_t tiles_n) {
    E("        const uint a0 = tg_pack_bf16(a_tile[sm + g][2 * q], a_tile[sm + g][2 * q + 1]);\n");
    E("        const uint a1 = tg_pack_bf16(a_tile[sm + g + 8][2 * q], a_tile[sm + g + 8][2 * q + 1]);\n");
    E("        const uint a2 = tg_pack_bf16(a_tile[sm + g][2 * q + 8], a_tile[sm + g][2 * q + 9]);\n");
    E("        const uint a3 = tg_pack_bf16(a_tile[sm + g + 8][2 * q + 8], a_tile[sm + g + 8][2 * q + 9]);\n");
    E("#pragma unroll\n");
    E("        for (int j = 0; j < %d; j++) {\n", tiles_n);
    E("            const int bn = sn + %d * j + g;\n", MMA_N);
    E("            const uint b0 = tg_pack_bf16(b_tile[2 * q][bn], b_tile[2 * q + 1][bn]);\n");
    E("            const uint b1 = tg_pack_bf16(b_tile[2 * q + 8][bn], b_tile[2 * q + 9][bn]);\n");
    E("            tg_mma_m16n8k16_bf16(acc[j], a0, a1, a2, a3, b0, b1);\n");
    E("        }\n");
}

void tg_emit_tc_cuda(const emitter *e, const tg_route *r, const tg_gen_matmul *p, const char *name) {
    const int32_t tm = r->tile_m, tn = r->tile_n, tk = r->tile_k, nthreads = r->threads_x * r->threads_y;
    const int32_t wc = TG_TC_SIMDGROUP_COLS;
    const int32_t wm = tm / TG_TC_SIMDGROUP_ROWS, wn = tn / wc; /* a warp's block: 16 x 16 */
    const int32_t tiles_n = wn / MMA_N;                         /* its m16n8 tiles: 2 */
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_GROUP_Y] = true, [TG_B_LOCAL_INDEX] = true,
                               [TG_B_SIMDGROUP] = true };
    emit_tc_helpers(e);
    tg_matmul_signature(e, p, name, used);
    E("    %s ushort a_tile[%d][%d]; // [m][k], bf16 bits, DAZ'd\n", e->l->local_decl, tm, tk);
    E("    %s ushort b_tile[%d][%d]; // [k][n], bf16 bits, DAZ'd\n", e->l->local_decl, tk, tn);
    E("    const %s m0 = gy * %d;\n", e->it, tm);
    E("    const %s n0 = gx * %d;\n", e->it, tn);
    E("    // warp sg owns the %dx%d block at (sm, sn) of the tile, as %d m%dn%d tiles side by side\n", wm, wn,
      tiles_n, MMA_M, MMA_N);
    E("    const int sm = (int)(sg / %d) * %d;\n", wc, wm);
    E("    const int sn = (int)(sg %% %d) * %d;\n", wc, wn);
    E("    // lane = 4 * g + q: the mma fragments' coordinates (PTX ISA, mma.m16n8k16 .bf16)\n");
    E("    const int g = (int)(li %% %d) / 4;\n", WARP);
    E("    const int q = (int)(li %% %d) %% 4;\n", WARP);
    E("    float acc[%d][4];\n", tiles_n);
    E("#pragma unroll\n");
    E("    for (int j = 0; j < %d; j++)\n", tiles_n);
    E("#pragma unroll\n");
    E("        for (int i = 0; i < 4; i++)\n");
    E("            acc[j][i] = 0.0f;\n");
    E("    // zeros stand in for the elements past M, K and N: zero products leave the sums unchanged\n");
    E("    for (%s k0 = 0; k0 < %" PRId64 "; k0 += %d) {\n", e->it, p->k, tk);
    tg_emit_stage_a(e, r, p, "a_tile[r][kk]", nthreads, &stage_bf16);
    tg_emit_stage_b(e, r, p, "b_tile[kk][col]", nthreads, &stage_bf16);
    E("        %s\n", e->l->barrier);
    emit_k_step(e, tiles_n); /* routes.h's tile_k is the mma's k (16): one step per stage */
    E("        %s\n", e->l->barrier);
    E("    }\n");
    E("    // acc[j][i] is output (sm + g + 8 * (i / 2), sn + %d * j + 2 * q + i %% 2) of the tile\n", MMA_N);
    E("#pragma unroll\n");
    E("    for (int j = 0; j < %d; j++) {\n", tiles_n);
    E("#pragma unroll\n");
    E("        for (int i = 0; i < 4; i++) {\n");
    E("            const %s m = m0 + sm + g + 8 * (i / 2);\n", e->it);
    E("            const %s n = n0 + sn + %d * j + 2 * q + i %% 2;\n", e->it, MMA_N);
    E("            if (m < %" PRId64 " && n < %" PRId64 ")\n", p->m, p->n);
    tg_emit_store(e, p, "                ", "acc[j][i]");
    E("        }\n");
    E("    }\n");
    E("}\n");
}
