import time, statistics, torch, kda, kda.ops
torch.manual_seed(0)
B, T, H, K = 1, 1, 1, 16
q = torch.randn(B, T, H, K); k = torch.randn(B, T, H, K); v = torch.randn(B, T, H, K)
g = -torch.rand(B, T, H, K); beta = torch.rand(B, T, H)
pool = torch.zeros(4, H, K, K); idx = torch.tensor([1], dtype=torch.int32)
def t(f, n=3000):
    for _ in range(200): f()
    xs = []
    for _ in range(15):
        t0 = time.perf_counter()
        for _ in range(n // 15): f()
        xs.append((time.perf_counter() - t0) / (n // 15) * 1e6)
    return statistics.median(xs)
with torch.no_grad():
    print("chunk_kda us", round(t(lambda: kda.chunk_kda(q, k, v, g, beta)), 2))
    print("decode us", round(t(lambda: kda.fused_recurrent_kda(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx, state_v_first=True)), 2))
