set terminal pngcairo size 900,500 font 'sans,10'
set output 'memory.png'
set title 'Peak RSS against live keys in one window (median, min-max)'
set xlabel 'live keys'
set ylabel 'peak RSS, MiB'
set logscale x
set grid
set key top left
plot 'memory.dat' using 1:2:3:4 with yerrorlines title 'stage 1', 'memory.dat' using 1:5:6:7 with yerrorlines title 'stage 2'
