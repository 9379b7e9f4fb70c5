import subprocess, re, sys
pre = sys.argv[1] if len(sys.argv) > 1 else "cg"
incl = (sys.argv[2] if len(sys.argv) > 2 else "no")
tok = r"\s*([\d,]+|\.)(?:\s+\(\s*[\d.]+%\))?"
pat = re.compile("^" + tok*4 + r"\s+(\S.*)$")
def load(f):
    out = subprocess.run(["callgrind_annotate","--show=Ir,ILmr,DLmr,DLmw","--threshold=100",f"--inclusive={incl}","--auto=no",f],capture_output=True,text=True).stdout
    d = {}
    for line in out.splitlines():
        m = pat.match(line)
        if not m: continue
        vals = [0 if x=="." else int(x.replace(",","")) for x in m.groups()[:4]]
        name = m.group(5).split(" [")[0].split("/")[-1]
        d[name] = [a+b for a,b in zip(d.get(name,[0]*4), vals)]
    return d
c = {k: load(f"{pre}.{k}") for k in ["on.100","on.300","off.100","off.300"]}
names = set().union(*[set(x) for x in c.values()])
rows = []
for n in names:
    g = lambda k,i: c[k].get(n,[0]*4)[i]
    v = [((g("on.300",i)-g("on.100",i))-(g("off.300",i)-g("off.100",i)))/200 for i in range(4)]
    rows.append((v,n))
rows.sort(key=lambda r: -(r[0][1]+r[0][2]+r[0][3]))
for v,n in rows[:45]:
    if abs(v[1]+v[2]+v[3]) < 0.4: continue
    print(f"{v[0]:7.0f} Ir {v[1]:5.1f} IL {v[2]:5.1f} DLr {v[3]:5.1f} DLw  {n}")
