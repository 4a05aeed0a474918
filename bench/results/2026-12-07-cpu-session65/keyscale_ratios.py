"""test_state_condition.py's keyscale ratios over a range of seeds (session 65): python3 keyscale_ratios.py FIRST LAST V
from the repository root; prints the run's seconds and the percentiles 0, 1, 5, 50, 95, 100 of both ratios."""
import sys, numpy as np, time
sys.path.insert(0, "scripts/models")
import state_condition as sc
r1=[];r2=[]
t=time.time()
for seed in range(int(sys.argv[1]), int(sys.argv[2])):
    rng = np.random.default_rng(seed)
    L, K, V = 512, 64, int(sys.argv[3])
    base = rng.standard_normal(K)
    near = base[None, :] + 1e-3 * rng.standard_normal((L, K))
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    rand = rng.standard_normal((L, K))
    rand /= np.linalg.norm(rand, axis=1, keepdims=True)
    v, g, S = rng.standard_normal((L, V)), np.full((L, K), -1e-3), np.zeros((V, K))
    def keyscale(k, b):
        S_T, _, Y, _, _ = sc.head_measures(S, k, v, g, np.full(L, b))
        return np.linalg.norm(Y) / np.linalg.norm(S_T)
    h=keyscale(near,1.999); a=keyscale(near,0.999); b=keyscale(rand,1.999)
    r1.append(h/a); r2.append(h/b)
print(time.time()-t)
r1=np.array(r1); r2=np.array(r2)
print("near b1:", np.percentile(r1,[0,1,5,50,95,100]))
print("rand b2:", np.percentile(r2,[0,1,5,50,95,100]))
