# Emulates the p4mma block-pair fragment index math (one warp, 32 channels) against direct products.
import numpy as np
rng = np.random.default_rng(1)
C, K, W, kSub = 64, 128, 128, 16
dM = np.tril(rng.standard_normal((C, C))); dA = np.tril(rng.standard_normal((C, C)), -1)
Qs = rng.standard_normal((C, K)); Ks = rng.standard_normal((C, K)); beta = rng.random(C)
Xs = rng.random((C, K))  # a_r table
ev = rng.random((C, K))
def mma(c, a, b):  # a: per lane [4], b: per lane [2]; c per lane [4]
    A = np.zeros((16, 8)); B = np.zeros((8, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        A[g, t], A[g + 8, t], A[g, t + 4], A[g + 8, t + 4] = a[lane]
        B[t, g], B[t + 4, g] = b[lane]
    Cm = A @ B
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        c[lane] += np.array([Cm[g, 2*t], Cm[g, 2*t+1], Cm[g+8, 2*t], Cm[g+8, 2*t+1]])
for warp in range(4):
    wch = 32 * warp
    for J in range(3):
        c0 = kSub * J
        KE = np.zeros((16, W))
        KE[:, wch:wch+32] = Ks[c0:c0+16, wch:wch+32] * ev[c0:c0+16, wch:wch+32]
        for I in range(J + 1, 4):
            r0 = kSub * I
            PR = np.zeros((48, W))
            def fa(Mat, ks, trans):
                out = []
                for lane in range(32):
                    g, t = lane >> 2, lane & 3; rr, cc = g, 8*ks + t
                    base = lambda i, j: Mat[r0 + i, c0 + j]
                    if not trans:
                        out.append([base(rr, cc), base(rr+8, cc), base(rr, cc+4), base(rr+8, cc+4)])
                    else:  # A[c0*pitch + r0] with A at (r0,c0): element row=cc, col=rr
                        out.append([base(cc, rr), base(cc, rr+8), base(cc+4, rr), base(cc+4, rr+8)])
                return out
            for nt in range(4):
                rq = [np.zeros(4) for _ in range(32)]; rk = [np.zeros(4) for _ in range(32)]; ck = [np.zeros(4) for _ in range(32)]
                for ks in range(2):
                    bke = []; bq = []; bk = []
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3; n = wch + 8*nt + g; k = 8*ks + t
                        bke.append([KE[k, n], KE[k+4, n]])
                        rows = [r0 + 8*ks + t + 4*e for e in range(2)]
                        bq.append([Qs[r, n] * Xs[r, n] for r in rows]); bk.append([beta[r] * Ks[r, n] * Xs[r, n] for r in rows])
                    mma(rq, fa(dM, ks, False), bke); mma(rk, fa(dA, ks, False), bke)
                    mma(ck, fa(dM, ks, True), bq); mma(ck, fa(dA, ks, True), bk)
                for lane in range(32):
                    g, t = lane >> 2, lane & 3; col = wch + 8*nt + 2*t
                    PR[g, col:col+2] = rq[lane][:2]; PR[g+8, col:col+2] = rq[lane][2:]
                    PR[16+g, col:col+2] = rk[lane][:2]; PR[24+g, col:col+2] = rk[lane][2:]
                    PR[32+g, col:col+2] = ck[lane][:2]; PR[40+g, col:col+2] = ck[lane][2:]
            sl = slice(wch, wch + 32)
            KEJ = Ks[c0:c0+16] * ev[c0:c0+16]
            RQ = dM[r0:r0+16, c0:c0+16] @ KEJ; RK = dA[r0:r0+16, c0:c0+16] @ KEJ
            QA = Qs[r0:r0+16] * Xs[r0:r0+16]; BKA = beta[r0:r0+16, None] * Ks[r0:r0+16] * Xs[r0:r0+16]
            CK = dM[r0:r0+16, c0:c0+16].T @ QA + dA[r0:r0+16, c0:c0+16].T @ BKA
            for name, got, want in (("rq", PR[0:16, sl], RQ[:, sl]), ("rk", PR[16:32, sl], RK[:, sl]), ("ck", PR[32:48, sl], CK[:, sl])):
                assert np.allclose(got, want), (name, warp, J, I, np.abs(got - want).max())
print("fragment index model: PR == direct products for every warp and pair")
