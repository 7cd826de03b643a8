set terminal pngcairo size 900,500 font 'sans,10'
set output 'events_per_s.png'
set style data histograms
set style histogram errorbars gap 2 lw 1
set style fill solid 0.6 border -1
set grid ytics
set xtics rotate by -25 left noenhanced
set key off
set title 'Events per wall-clock second (thousands; median, min-max), higher is better'
set ylabel 'k events/s'
set logscale y
plot 'events_per_s.dat' using 2:3:4:xtic(1)
